"""Is the warm daemon up? Asked over its socket (PING), plus how the process was started.

Shared by `pycni inspect` (the daemon box of the picture and its text line) and
`pycni doctor`. Only reads; a daemon that does not answer is a normal state (the entry
points then run every plugin in-process), not an error.
"""

from __future__ import annotations

import os

from pycni.inspect.model import DaemonStatus


def _read(path: str, limit: int = 4096) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def _command(pid: int) -> str:
    argv = [a.decode(errors="replace") for a in _read(f"/proc/{pid}/cmdline").split(b"\0") if a]
    return " ".join(argv)[:120]


def started_by(pid: int) -> str:
    """ "systemd unit X" when the process sits in a .service cgroup, else its parent's command."""
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


def read_daemon(socket_path: str, timeout: float = 2.0) -> DaemonStatus:
    """PING the daemon on ``socket_path``; never raises."""
    from pycni.fast import client

    status = DaemonStatus(socket=socket_path)
    try:
        health = client.ping(socket_path, timeout=timeout)
    except client.DaemonUnavailable as exc:
        status.error = str(exc)
        return status
    except client.RunLocally as exc:
        status.answers = True
        status.mode = "in-process here"
        status.status = "other mount namespace"
        status.error = str(exc)
        return status
    except (OSError, ValueError) as exc:
        status.error = f"the daemon on {socket_path} did not answer properly: {exc}"
        return status
    status.answers = True
    status.mode = "warm"
    status.status = str(health.get("status", ""))
    pid = health.get("pid")
    status.pid = pid if isinstance(pid, int) else None
    workers = health.get("workers")
    status.workers = workers if isinstance(workers, int) else None
    uptime = health.get("uptimeSeconds")
    status.uptime_seconds = float(uptime) if isinstance(uptime, int | float) else None
    if status.pid is not None and os.path.exists(f"/proc/{status.pid}"):
        status.started_by = started_by(status.pid)
    return status
