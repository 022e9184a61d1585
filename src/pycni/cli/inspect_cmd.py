"""`pycni inspect` (what CNI has done on this node) and `pycni cleanup` (remove its leaks).

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

DEFAULT_CNI_PATH = "/opt/cni/bin"
# Same defaults as pycni.inspect.collect, repeated so that registering stays import-free.
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CACHE_DIR = "/var/lib/cni"
DEFAULT_DATA_DIR = "/var/lib/cni/networks"
DEFAULT_NETNS_DIR = "/run/netns"
DEFAULT_DAEMON_SOCKET = "/run/pycni/pycni.sock"  # pycni.daemon.protocol.DEFAULT_SOCKET
DEFAULT_GRACE_PERIOD = 600.0  # = pycni.inspect.leaks.DEFAULT_GRACE_PERIOD (import-free here)
EXIT_LEFT = 1  # `cleanup` / `gc`: some leak could not be removed
EXIT_REFUSED = 4  # `cleanup` / `gc`: the scan cannot see the whole node, nothing was freed


def add_gc_options(parser: argparse.ArgumentParser) -> None:
    """``--grace-period`` and ``--dry-run``, shared by `cleanup` and the node-wide `gc`."""
    parser.add_argument(
        "--grace-period",
        type=_seconds,
        default=DEFAULT_GRACE_PERIOD,
        metavar="SECONDS",
        help="leave anything younger than this alone: an ADD may still be in progress "
        f"(reservation file and cache entry age; default {DEFAULT_GRACE_PERIOD:g})",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing; print what would be removed and why, one line each",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < 10**9:
        raise argparse.ArgumentTypeError("must be between 0 and 1e9 seconds")
    return value


def _add_paths(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--netconf-dir",
        default=os.environ.get("NETCONFPATH", DEFAULT_CONF_DIR),
        help="network configuration dir (default $NETCONFPATH or /etc/cni/net.d)",
    )
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="result cache dir")
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help="host-local store for networks whose config sets no dataDir",
    )
    parser.add_argument("--netns-dir", default=DEFAULT_NETNS_DIR, help="named namespaces dir")
    parser.add_argument(
        "--dnsname-dir",
        default=_dnsname_dir(),
        help="the dnsname plugin's base dir (default as the plugin: "
        "$XDG_RUNTIME_DIR/containers/cni/dnsname or /run/containers/cni/dnsname)",
    )


def _dnsname_dir() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime:
        return os.path.join(runtime, "containers", "cni", "dnsname")
    return "/run/containers/cni/dnsname"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "inspect",
        help="show what CNI has done on this node, and what looks leaked",
        description="Networks, cached attachments, host-local reservations, bridges, veths "
        "with their pod ends, routes and port mappings of the current network namespace, "
        "and the leaks among them (removed by `pycni cleanup`). Exit code 0 always unless "
        "--check is given, then 3 when leaks were found.",
    )
    _add_paths(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--svg", metavar="FILE", help="also write a topology diagram to FILE")
    parser.add_argument("--check", action="store_true", help="exit 3 when leaks were found")
    parser.add_argument(
        "--socket",
        default=None,
        help="the daemon's socket, asked whether it answers (default: the one the installed "
        f"entry points forward to, else {DEFAULT_DAEMON_SOCKET})",
    )
    parser.add_argument(
        "--grace-period",
        type=_seconds,
        default=DEFAULT_GRACE_PERIOD,
        metavar="SECONDS",
        help="count nothing younger than this as leaked (default "
        f"{DEFAULT_GRACE_PERIOD:g}, as cleanup)",
    )
    parser.add_argument(
        "--cni-path",
        default=os.environ.get("CNI_PATH"),
        help="plugin dirs whose entry points are shown and tell which daemon to ask, "
        "':'-separated (default $CNI_PATH, else the plugin dirs of the runtimes installed "
        "here (containers.conf, containerd's and CRI-O's configs), else /opt/cni/bin)",
    )
    parser.set_defaults(func=run_inspect)

    clean = subparsers.add_parser(
        "cleanup",
        help="GC every network of the conf dir and remove leaked state",
        description="Frees only what is proven leaked and older than the grace period: "
        "DEL through its chain for each cached attachment whose namespace is gone, then "
        "direct removal of reservations, veths, port mappings and temp files whose "
        "attachment is proven gone (see docs/security.md, How GC decides). Frees nothing "
        "and exits 4 when it cannot see every network namespace of the node (run from a "
        "PID, mount or user namespace of its own, or a process it could not examine). "
        "Exit code 1 when something is left.",
    )
    _add_paths(clean)
    clean.add_argument(
        "--cni-path",
        default=os.environ.get("CNI_PATH", DEFAULT_CNI_PATH),
        help="plugin dirs for DEL/GC, ':'-separated (default $CNI_PATH or /opt/cni/bin)",
    )
    clean.add_argument(
        "--no-gc", action="store_true", help="only remove leaks directly, do not run plugins"
    )
    add_gc_options(clean)
    clean.set_defaults(func=run_cleanup)


def _paths(args: argparse.Namespace) -> Any:
    from pycni.inspect.collect import Paths

    return Paths(
        conf_dir=args.netconf_dir,
        cache_dir=args.cache_dir,
        data_dir=args.data_dir,
        netns_dir=args.netns_dir,
        dnsname_dir=getattr(args, "dnsname_dir", None) or _dnsname_dir(),  # `pycni gc` has none
    )


def run_inspect(args: argparse.Namespace) -> int:
    from pycni.inspect import leaks as leaks_mod
    from pycni.inspect import model, render_svg, render_text
    from pycni.inspect.collect import collect
    from pycni.inspect.daemon import choose_socket, read_daemon

    state = collect(_paths(args))
    dirs = inspect_plugin_dirs(args.cni_path)
    socket_path, why = choose_socket(args.socket, dirs, DEFAULT_DAEMON_SOCKET)
    state.daemon = read_daemon(socket_path, plugin_dirs=dirs)
    state.daemon.chosen_because = why
    found = leaks_mod.find_leaks(state, grace=args.grace_period)
    if args.svg:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(render_svg.render(state, found))
    if args.json:
        data = model.to_dict(state)
        data["leaks"] = [model.to_dict(leak) for leak in found]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(render_text.render(state, found))
        if args.svg:
            sys.stdout.write(f"topology diagram written to {args.svg}\n")
    return 3 if args.check and found else 0


def inspect_plugin_dirs(cni_path: str | None) -> list[str]:
    """The plugin dirs given, else every runtime's here (else /opt/cni/bin), and a kept demo's
    (so the daemon its entry points forward to is the one asked)."""
    if cni_path is not None:
        return [d for d in cni_path.split(os.pathsep) if d]
    from pycni.inspect import runtimes
    from pycni.inspect.daemon import KEPT_DEMO_PLUGIN_DIR

    found = [d for d in runtimes.plugin_dirs(runtimes.find()) if os.path.isdir(d)]
    if not found:
        found = [DEFAULT_CNI_PATH]
    if os.path.isdir(KEPT_DEMO_PLUGIN_DIR) and KEPT_DEMO_PLUGIN_DIR not in found:
        found.append(KEPT_DEMO_PLUGIN_DIR)
    return found


def run_cleanup(args: argparse.Namespace) -> int:
    from pycni.inspect import cleanup

    report = cleanup.clean(
        _paths(args),
        [p for p in args.cni_path.split(":") if p],
        use_runtime=not args.no_gc,
        grace=args.grace_period,
        dry_run=args.dry_run,
    )
    for line in report.errors:
        if line not in report.refused:
            sys.stderr.write(f"warning: {line}\n")
    if report.refused:
        sys.stderr.write(
            "pycni: refusing to free anything: this scan cannot see every network namespace "
            "of the node, and one it cannot see may hold any address:\n"
        )
        for line in report.refused:
            sys.stderr.write(f"  {line}\n")
        sys.stdout.write("nothing freed\n")
        return EXIT_REFUSED
    if args.dry_run:
        for leak in report.planned:
            sys.stdout.write(f"would remove {leak.kind} {leak.subject}: {leak.reason}\n")
        if not report.planned:
            sys.stdout.write("nothing to clean\n")
        return 0
    for line in report.actions:
        sys.stdout.write(f"{line}\n")
    for leak in report.remaining:
        sys.stdout.write(f"still leaked: {leak.kind} {leak.subject}: {leak.reason}\n")
    if not report.remaining:
        sys.stdout.write("no leaks left\n")
    return EXIT_LEFT if report.remaining else 0
