"""What a runtime on this node would use, and what is left over.

- the plugin dirs (``CNI_PATH``) and the conf dir (``NETCONFPATH``) with where each came from;
- every network configuration: parsed, each plugin found, each supporting the cniVersion
  (libcni's own validation, so the answer is the runtime's);
- the daemon: does it answer, how was it started, and do installed entry points expect it;
- leftovers that `pycni inspect` reports as leaks.
"""

from __future__ import annotations

import os
import re

from pycni.doctor.report import FAIL, OK, WARN, Check
from pycni.record import record

_SCAN_LIMIT = 4 << 20
_PY_SOCKET = re.compile(rb"^SOCKET_PATH = '([^'\n]*)'$", re.M)
_PY_MODE = re.compile(rb"^MODE = '([^'\n]*)'$", re.M)


@record(frozen=True)
class Setting:
    """A directory setting and where it came from (flag, environment or default)."""

    value: str
    source: str


@record(frozen=True)
class EntryPoint:
    path: str
    form: str  # "c", "python", "inprocess"
    socket: str  # the daemon socket it forwards to ("" for inprocess, "?" if unknown)
    autostart: bool = False  # starts a daemon itself when none answers


def read_entry_point(path: str) -> EntryPoint | None:
    """A pycni entry point's form and daemon socket; None for any other file."""
    from pycni.fast.marker import ENTRY_MARKER

    try:
        with open(path, "rb") as f:
            data = f.read(_SCAN_LIMIT)
    except OSError:
        return None
    if ENTRY_MARKER not in data:
        return None
    from pycni.fast.install import entry_config

    config = entry_config(path) or {}
    if config.get("form") in ("c", "python"):  # entry points that carry their mode line
        return EntryPoint(path, config["form"], config["socket"], config.get("autostart") == "yes")
    if data.startswith(b"\x7fELF"):
        # The C forwarder always tries a daemon first; its socket path is compiled into the
        # code (not one readable string), so it counts as forwarding to the socket checked.
        return EntryPoint(path, "c", "?")
    mode = _PY_MODE.search(data)
    if mode and mode.group(1) == b"inprocess":
        return EntryPoint(path, "inprocess", "")
    sock = _PY_SOCKET.search(data)
    return EntryPoint(path, "python", sock.group(1).decode(errors="replace") if sock else "?")


def entry_points(dirs: list[str]) -> list[EntryPoint]:
    out = []
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            found = read_entry_point(os.path.join(directory, name))
            if found is not None:
                out.append(found)
    return out


def check_plugin_dirs(dirs: Setting) -> list[Check]:
    paths = [p for p in dirs.value.split(os.pathsep) if p]
    if not paths:
        return [
            Check(
                "plugin dirs",
                FAIL,
                f"no plugin directory ({dirs.source} is empty)",
                "set CNI_PATH or --cni-path to where the plugins are",
            )
        ]
    present = [p for p in paths if os.path.isdir(p)]
    if not present:
        return [
            Check(
                "plugin dirs",
                FAIL,
                f"{dirs.value} ({dirs.source}) does not exist",
                f"install the plugins there: pycni plugins install {paths[0]}",
            )
        ]
    files = [
        name
        for d in present
        for name in sorted(os.listdir(d))
        if os.path.isfile(os.path.join(d, name)) and os.access(os.path.join(d, name), os.X_OK)
    ]
    ours = entry_points(present)
    forms = sorted({e.form for e in ours})
    detail = (
        f"{dirs.value} ({dirs.source}): {len(files)} plugins, "
        f"{len(ours)} of them pycni entry points" + (f" ({', '.join(forms)})" if forms else "")
    )
    status = OK if files else FAIL
    missing = [p for p in paths if p not in present]
    if files and missing:
        status = WARN
        detail += f"; missing: {', '.join(missing)}"
    return [
        Check(
            "plugin dirs",
            status,
            detail,
            f"pycni plugins install {present[0]}",
            {"dirs": paths, "source": dirs.source, "plugins": files},
        )
    ]


def check_conf_dir(conf_dir: Setting, plugin_dirs: Setting) -> list[Check]:
    from pycni.runtime.api import CNIConfig
    from pycni.runtime.confdir import list_network_confs
    from pycni.spec.errors import CNIError

    if not os.path.isdir(conf_dir.value):
        return [
            Check(
                "conf dir",
                FAIL,
                f"{conf_dir.value} ({conf_dir.source}) does not exist: a runtime finds no network",
                "create it and write a network configuration (.conflist) there",
            )
        ]
    entries = list_network_confs(conf_dir.value)
    head = Check(
        "conf dir",
        OK if entries else WARN,
        f"{conf_dir.value} ({conf_dir.source}): {len(entries)} network configuration(s)",
        "write a network configuration (.conflist) there; see docs/plugins/README.md",
    )
    out = [head]
    cni = CNIConfig([p for p in plugin_dirs.value.split(os.pathsep) if p])
    for path, conf in entries:
        base = os.path.basename(path)
        if isinstance(conf, Exception):
            out.append(
                Check(f"conf {base}", FAIL, f"cannot be parsed: {conf}", "fix or remove the file")
            )
            continue
        plugins = [p.type for p in conf.plugins]
        name = f"network {conf.name}"
        try:
            caps = cni.validate_network_list(conf, timeout=30)
        except CNIError as err:
            out.append(
                Check(
                    name,
                    FAIL,
                    f"{base}: {err.msg}",
                    f"install the missing plugins into {plugin_dirs.value} "
                    "(pycni plugins install DIR) or fix the configuration",
                    {"file": path, "plugins": plugins},
                )
            )
            continue
        extra = f", capabilities {', '.join(caps)}" if caps else ""
        out.append(
            Check(
                name,
                OK,
                f"{base}: {' → '.join(plugins)} installed, all support {conf.cni_version}{extra}",
                data={"file": path, "plugins": plugins},
            )
        )
    return out


def check_daemon(socket_path: str, plugin_dirs: Setting) -> list[Check]:
    from pycni.inspect.daemon import read_daemon

    status = read_daemon(socket_path)
    dirs = [p for p in plugin_dirs.value.split(os.pathsep) if p]
    forwarding = [e for e in entry_points(dirs) if e.socket in (socket_path, "?")]
    data = {
        "socket": socket_path,
        "answers": status.answers,
        "pid": status.pid,
        "startedBy": status.started_by,
        "forwardingEntryPoints": len(forwarding),
    }
    if status.answers and status.status == "other mount namespace":
        return [
            Check(
                "daemon",
                WARN,
                f"{status.error}; {len(forwarding)} entry points forward to it",
                "run this in the node's mount namespace (nsenter --net=NETNS instead of "
                "ip netns exec) to check what a runtime gets",
                data,
            )
        ]
    if status.answers:
        facts = [f"pid {status.pid}"]
        if status.workers is not None:
            facts.append(f"{status.workers} workers")
        if status.started_by:
            facts.append(f"started {status.started_by}")
        state = "answering" if status.status == "ok" else status.status
        return [
            Check(
                "daemon",
                OK if status.status == "ok" else WARN,
                f"{state} on {socket_path} ({', '.join(facts)}); "
                f"{len(forwarding)} entry points forward to it",
                "wait for it to drain and restart it",
                data,
            )
        ]
    if forwarding and all(e.autostart for e in forwarding):
        return [
            Check(
                "daemon",
                WARN,
                f"no daemon on {socket_path} yet: the {len(forwarding)} entry points forwarding "
                "to it start one on their next call (that call runs in-process)",
                "nothing to do; or run it under systemd (contrib/pycni.socket) to keep it warm",
                data,
            )
        ]
    if forwarding:
        return [
            Check(
                "daemon",
                FAIL,
                f"{status.error or f'no daemon answers on {socket_path}'}, but "
                f"{len(forwarding)} entry points forward to it: every call falls back to a "
                "slow in-process run",
                f"start it: pycni daemon --socket {socket_path} (or systemctl start pycni)",
                data,
            )
        ]
    return [
        Check(
            "daemon",
            WARN,
            f"no daemon on {socket_path}: plugins run in-process (slower, but they work)",
            "for the fast path: pycni plugins install DIR, then pycni daemon",
            data,
        )
    ]


def check_leaks(conf_dir: str, cache_dir: str, data_dir: str, netns_dir: str) -> list[Check]:
    from pycni.inspect.collect import Paths, collect
    from pycni.inspect.leaks import find_leaks

    state = collect(Paths(conf_dir, cache_dir, data_dir, netns_dir))
    leaks = find_leaks(state)
    flags = f"--netconf-dir {conf_dir} --cache-dir {cache_dir} --data-dir {data_dir}"
    if not leaks:
        return [
            Check(
                "leaks",
                OK,
                f"nothing left behind ({len(state.attachments)} attachments, "
                f"{len(state.reservations)} reservations, all accounted for)",
            )
        ]
    kinds: dict[str, int] = {}
    for leak in leaks:
        kinds[leak.kind] = kinds.get(leak.kind, 0) + 1
    counted = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    first = leaks[0]
    return [
        Check(
            "leaks",
            FAIL,
            f"{len(leaks)} left behind ({counted}), e.g. {first.kind} {first.subject}: "
            f"{first.reason}",
            f"see them: pycni inspect {flags}; remove them: pycni cleanup {flags}",
            {"leaks": [{"kind": lk.kind, "subject": lk.subject} for lk in leaks]},
        )
    ]
