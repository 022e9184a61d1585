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
from pycni.entrypoints.install import entry_config
from pycni.inspect.collect import Paths, collect
from pycni.inspect.daemon import KEPT_DEMO_PLUGIN_DIR, choose_socket, forwarded_sockets, read_daemon
from pycni.inspect.leaks import find_leaks
from pycni.inspect.runtimes import RuntimeView
from pycni.inspect.runtimes import plugin_dirs as runtime_dirs
from pycni.plugins import config_check
from pycni.record import record
from pycni.runtime.api import CNIConfig
from pycni.runtime.confdir import list_network_confs
from pycni.runtime.find import find_in_path
from pycni.skel.entry_point import ENTRY_MARKER
from pycni.spec.conf import NetworkConfigList
from pycni.spec.errors import CNIError

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
    try:
        with open(path, "rb") as f:
            data = f.read(_SCAN_LIMIT)
    except OSError:
        return None
    if ENTRY_MARKER not in data:
        return None

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


def check_runtimes(views: list[RuntimeView]) -> list[Check]:
    """One line per runtime found: where it looks for plugins and networks, and what is there."""
    out = []
    for view in views:
        present = [d for d in view.plugin_dirs if os.path.isdir(d)]
        counts = [f"{d}: {len(_executables(d))} plugins" for d in present]
        detail = (
            f"plugins from {':'.join(view.plugin_dirs)} ({'; '.join(counts) or 'none exists'}), "
            f"networks from {view.conf_dir} (read from {view.source})"
        )
        status = OK if any(_executables(d) for d in present) else WARN
        if view.problem:
            status, detail = WARN, f"{detail}; {view.problem}"
        out.append(
            Check(
                f"runtime {view.runtime}",
                status,
                detail,
                f"install plugins into one of {', '.join(view.plugin_dirs)} "
                f"(pycni plugins install {view.plugin_dirs[0]})",
                {
                    "runtime": view.runtime,
                    "pluginDirs": list(view.plugin_dirs),
                    "confDir": view.conf_dir,
                    "source": view.source,
                },
            )
        )
    return out


def _executables(directory: str) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [
        name
        for name in names
        if os.path.isfile(os.path.join(directory, name))
        and os.access(os.path.join(directory, name), os.X_OK)
    ]


def check_plugin_dirs(dirs: Setting, views: list[RuntimeView] | None = None) -> list[Check]:
    """The caller's own plugin dirs. With only the default and runtimes found, the runtimes'
    lines say it all: /opt/cni/bin missing is no fault where no runtime looks there."""
    if dirs.source == "default" and views:
        return []
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
    files = [name for d in present for name in _executables(d)]
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


@record(frozen=True)
class Consumer:
    """Who reads a conf dir with which plugin dirs: a runtime, or this caller's settings."""

    label: str
    dirs: tuple[str, ...]


def consumers(
    conf_dir: Setting, plugin_dirs: Setting, views: list[RuntimeView]
) -> dict[str, list[Consumer]]:
    """Each conf dir to judge, with who reads it (the caller's first, then the runtimes)."""
    out: dict[str, list[Consumer]] = {}
    mine = os.path.normpath(conf_dir.value)
    if conf_dir.source != "default" or plugin_dirs.source != "default" or not views:
        dirs = tuple(p for p in plugin_dirs.value.split(os.pathsep) if p)
        out[mine] = [Consumer(f"this caller ({plugin_dirs.source})", dirs)]
    for view in views:
        out.setdefault(os.path.normpath(view.conf_dir), []).append(
            Consumer(view.runtime, view.plugin_dirs)
        )
    if mine not in out and not (conf_dir.source == "default" and views):
        # the caller's conf dir (given, or the default with no runtime found) is judged with
        # the caller's plugin dirs; the default one that no runtime found here reads is not
        dirs = tuple(p for p in plugin_dirs.value.split(os.pathsep) if p)
        out[mine] = [Consumer(f"this caller ({plugin_dirs.source})", dirs)]
    return out


def check_conf_dir(
    conf_dir: Setting, plugin_dirs: Setting, views: list[RuntimeView] | None = None
) -> list[Check]:
    """Every network of every conf dir a runtime (or the caller) reads, judged with the plugin
    dirs of each reader: a missing plugin fails only where a reader would fail."""
    out: list[Check] = []
    mine = os.path.normpath(conf_dir.value)
    for directory, readers in consumers(conf_dir, plugin_dirs, views or []).items():
        source = conf_dir.source if directory == mine else ", ".join(r.label for r in readers)
        name = "conf dir" if directory == mine else f"conf dir {directory}"
        out += _check_one_conf_dir(name, Setting(directory, source), readers)
    return out


def _check_one_conf_dir(name: str, conf_dir: Setting, readers: list[Consumer]) -> list[Check]:
    if not os.path.isdir(conf_dir.value):
        return [
            Check(
                name,
                FAIL,
                f"{conf_dir.value} ({conf_dir.source}) does not exist: a runtime finds no network",
                "create it and write a network configuration (.conflist) there",
            )
        ]
    entries = list_network_confs(conf_dir.value)
    head = Check(
        name,
        OK if entries else WARN,
        f"{conf_dir.value} ({conf_dir.source}): {len(entries)} network configuration(s)",
        "write a network configuration (.conflist) there; see docs/plugins/README.md",
    )
    out = [head]
    several = len(readers) > 1 or readers[0].label in ("podman", "containerd", "cri-o")
    for path, conf in entries:
        base = os.path.basename(path)
        if isinstance(conf, Exception):
            out.append(
                Check(f"conf {base}", FAIL, f"cannot be parsed: {conf}", "fix or remove the file")
            )
            continue
        plugins = [p.type for p in conf.plugins]
        check_name = f"network {conf.name}"
        out.extend(_config_findings(check_name, path, conf))
        failures, found_by, caps = [], [], []
        for reader in readers:
            cni = CNIConfig(list(reader.dirs))
            try:
                caps = cni.validate_network_list(conf, timeout=30)
            except CNIError as err:
                failures.append((reader, err.msg))
                continue
            try:
                where = os.path.dirname(find_in_path(plugins[0], list(reader.dirs)))
            except CNIError:
                where = "?"
            found_by.append(f"{reader.label} in {where}" if several else "")
        if failures:
            reader, msg = failures[0]
            who = f"{reader.label} would fail" if several else "fails"
            out.append(
                Check(
                    check_name,
                    FAIL,
                    f"{base}: {who}: {msg}",
                    f"install the missing plugins into one of {':'.join(reader.dirs)} "
                    "(pycni plugins install DIR) or fix the configuration",
                    {"file": path, "plugins": plugins, "reader": reader.label},
                )
            )
            continue
        extra = f", capabilities {', '.join(caps)}" if caps else ""
        where_text = f"; found by {', '.join(found_by)}" if several else ""
        out.append(
            Check(
                check_name,
                OK,
                f"{base}: {' → '.join(plugins)} installed, all support {conf.cni_version}"
                f"{extra}{where_text}",
                data={"file": path, "plugins": plugins},
            )
        )
    return out


def check_daemon(
    socket_given: str | None,
    plugin_dirs: Setting,
    views: list[RuntimeView] | None = None,
    default_socket: str = "/run/pycni/pycni.sock",
) -> list[Check]:
    """The daemon the installed entry points forward to (read from the entry points in the
    caller's and every runtime's plugin dirs), or the one given with --socket."""
    dirs = [p for p in plugin_dirs.value.split(os.pathsep) if p]
    dirs = list(dict.fromkeys([*dirs, *runtime_dirs(views or [])]))
    if (
        plugin_dirs.source == "default"
        and not forwarded_sockets(dirs)
        and os.path.isdir(KEPT_DEMO_PLUGIN_DIR)
    ):
        dirs.append(KEPT_DEMO_PLUGIN_DIR)  # a kept demo's daemon, when nothing else forwards
    socket_path, _why = choose_socket(socket_given, dirs, default_socket)
    status = read_daemon(socket_path)
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
                f"answering on {socket_path} ({len(forwarding)} entry points forward to it), "
                "but not to this process: it runs in another mount namespace than the daemon "
                "(e.g. under `ip netns exec`), so plugin calls made from here run in-process; "
                "a runtime's calls (from the node's mount namespace) go to the daemon",
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
    if not socket_given and not entry_points(dirs):
        return [
            Check(
                "daemon",
                OK,
                "not needed: no pycni entry points in the plugin dirs of the runtimes or "
                f"CNI_PATH ({':'.join(dirs) or 'none'}), so no call would go to a daemon",
                "",
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
    state = collect(Paths(conf_dir, cache_dir, data_dir, netns_dir))
    leaks = find_leaks(state)
    flags = f"--netconf-dir {conf_dir} --cache-dir {cache_dir} --data-dir {data_dir}"
    if not state.addresses_complete:  # find_leaks withholds its verdict: say so, never "none"
        return [
            Check(
                "leaks",
                WARN,
                "not judged: this view of the node is partial ("
                + "; ".join(state.problems or ["the namespace scan was incomplete"])
                + ")",
                "run pycni doctor in the node's initial PID and mount namespaces "
                "(nsenter --net, not ip netns exec)",
            )
        ]
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


def _config_findings(check_name: str, path: str, conf: NetworkConfigList) -> list[Check]:
    """What `pycni validate` says of the config itself (typos, values ADD would refuse, chains
    that cannot work), as one check: nothing when it is clean."""
    findings = config_check.check_network(conf, path, plugin_found=lambda _type: True)
    if not findings:
        return []
    status = FAIL if config_check.exit_code(findings) == 1 else WARN
    lines = "; ".join(f"{f.severity} at {f.path}: {f.message}" for f in findings)
    return [
        Check(
            f"{check_name} config",
            status,
            f"{os.path.basename(path)}: {lines}",
            f"fix the configuration (pycni validate {conf.name} lists each problem)",
            {"file": path, "findings": [f.__dict__ for f in findings]},
        )
    ]
