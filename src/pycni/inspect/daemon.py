"""Is the warm daemon up? Asked over its socket (PING), plus how the process was started.

Shared by `pycni inspect` (the daemon box of the picture and its text line) and
`pycni doctor`. Only reads; a daemon that does not answer is a normal state (the entry
points then run every plugin in-process), not an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from pycni.daemon import client
from pycni.entrypoints.install import entry_config
from pycni.inspect.model import DaemonStatus, EntryPointDir

# Set in a daemon's environment by the tool that started it (`pycni demo`), in words: a daemon
# whose parent has exited is otherwise only "by hand, parent pid 1".
LAUNCHER_ENV = "PYCNI_LAUNCHER"
# Where `pycni demo --keep` leaves its entry points (pycni.demo.run.KEEP_DIR + /bin).
KEPT_DEMO_PLUGIN_DIR = "/run/pycni-demo/bin"


def _read(path: str, limit: int = 4096) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def _command(pid: int) -> str:
    argv = [a.decode(errors="replace") for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a]
    return " ".join(argv)[:120]


def _launcher(pid: int) -> str:
    """The process's PYCNI_LAUNCHER, if the tool that started it set one (root reads environ)."""
    for entry in _read(f"/proc/{pid}/environ", 1 << 16).split(b"\0"):
        key, _, value = entry.partition(b"=")
        if key == LAUNCHER_ENV.encode():
            text = value.decode(errors="replace")[:160]
            return "".join(ch if ch.isprintable() else "?" for ch in text)
    return ""


def started_by(pid: int) -> str:
    """Who started ``pid``: the launcher it names (``pycni demo``), "systemd unit X" when it sits
    in a .service cgroup, else its parent's command."""
    launcher = _launcher(pid)
    if launcher:
        return launcher
    for line in _read(f"/proc/{pid}/cgroup").decode(errors="replace").splitlines():
        path = line.split(":", 2)[-1]
        unit = path.rstrip("/").rsplit("/", 1)[-1]
        if unit.endswith(".service") and not unit.startswith("user@"):
            return f"systemd unit {unit}"
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    try:
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return ""
    parent = _command(ppid) or f"pid {ppid}"
    return f"by hand, parent: {parent} (pid {ppid})"


def describe_entry_point(config: dict[str, str], socket_path: str) -> str:
    """One entry point's mode in words (config: pycni.entrypoints.install.entry_config)."""
    form = config.get("form", "unknown")
    if form == "inprocess":
        return "inprocess form (never uses a daemon)"
    if form == "unknown":
        return "installed by an older pycni (reinstall to see its mode)"
    words = [f"{form} form"]
    sock = config.get("socket", "")
    words.append("forwards to this socket" if sock == socket_path else f"forwards to {sock}")
    if config.get("autostart") == "yes":
        idle = config.get("idle-exit", "?")
        words.append(
            "autostarts a daemon"
            + (" (never idle-exits)" if idle == "0" else f" (idle exit {idle}s)")
        )
    else:
        words.append("no autostart")
    return ", ".join(words)


def entry_point_dirs(dirs: Iterable[str], socket_path: str) -> list[EntryPointDir]:
    """How the pycni entry points in each plugin directory were installed (reads files only)."""
    out = []
    for directory in dirs:
        found = EntryPointDir(directory)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            found.modes.append("does not exist")
            out.append(found)
            continue
        except NotADirectoryError:
            found.modes.append("not a directory")
            out.append(found)
            continue
        except OSError as err:
            found.modes.append(f"not readable ({err.strerror})")
            out.append(found)
            continue
        for name in names:
            path = os.path.join(directory, name)
            if name.startswith(".") or not os.path.isfile(path):
                continue
            config = entry_config(path)
            if config is None:
                continue
            found.plugins += 1
            mode = describe_entry_point(config, socket_path)
            if mode not in found.modes:
                found.modes.append(mode)
        out.append(found)
    return out


def forwarded_sockets(dirs: Iterable[str]) -> list[tuple[str, int]]:
    """The daemon sockets the pycni entry points in ``dirs`` forward to, with how many entry
    points forward to each, most first: the daemon a runtime's calls reach, wherever it is."""
    counts: dict[str, int] = {}
    for directory in dict.fromkeys(dirs):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if name.startswith(".") or not os.path.isfile(path):
                continue
            config = entry_config(path)
            if config is None or config.get("form") not in ("c", "python"):
                continue
            sock = config.get("socket", "")
            if sock:
                counts[sock] = counts.get(sock, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def choose_socket(given: str | None, dirs: Iterable[str], default: str) -> tuple[str, str]:
    """The socket to ask and why: the one given, else the one most installed entry points
    forward to, else the default."""
    found = forwarded_sockets(dirs)
    if given:
        count = dict(found).get(given, 0)
        return given, f"given; {count} entry points forward to it" if count else "given"
    if found:
        sock, count = found[0]
        return sock, f"{count} entry points forward to it"
    return default, "default"


def read_daemon(
    socket_path: str, timeout: float = 2.0, plugin_dirs: Iterable[str] = ()
) -> DaemonStatus:
    """PING the daemon on ``socket_path``, and read the entry points' modes; never raises."""
    status = DaemonStatus(socket=socket_path)
    status.entry_points = entry_point_dirs(plugin_dirs, socket_path)
    try:
        health = client.ping(socket_path, timeout=timeout)
    except client.DaemonUnavailable as exc:
        status.error = str(exc)
        status.here = "in-process: no daemon answers, the entry points run the plugins themselves"
        return status
    except client.RunLocally as exc:
        status.answers = True
        status.mode = "warm"
        status.status = "other mount namespace"
        status.error = str(exc)
        status.here = (
            "in-process: this process runs in another mount namespace than the daemon "
            "(e.g. under `ip netns exec`), and the daemon serves no call from there; "
            "calls from the node's mount namespace (a runtime's, or under "
            "`nsenter --net=NETNS`) go to the daemon"
        )
        return status
    except (OSError, ValueError) as exc:
        status.error = f"the daemon on {socket_path} did not answer properly: {exc}"
        status.here = "in-process: the daemon did not answer properly"
        return status
    status.answers = True
    status.mode = "warm"
    status.here = "through the daemon"
    status.status = str(health.get("status", ""))
    pid = health.get("pid")
    status.pid = pid if isinstance(pid, int) else None
    workers = health.get("workers")
    status.workers = workers if isinstance(workers, int) else None
    uptime = health.get("uptimeSeconds")
    status.uptime_seconds = float(uptime) if isinstance(uptime, int | float) else None
    how = health.get("startedBy")
    status.how = how if isinstance(how, str) else ""
    if status.how == "autostart":  # its parent is gone on purpose (double fork)
        status.started_by = "by autostart (an entry point found no daemon)"
    elif status.pid is not None and os.path.exists(f"/proc/{status.pid}"):
        status.started_by = started_by(status.pid)
        if status.how == "socket-activation":
            status.started_by = f"by socket activation, {status.started_by}"
    return status
