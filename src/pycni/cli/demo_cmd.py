"""`pycni demo`: a throwaway node with three pods, networked, checked, shown and removed.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="network three pods in a throwaway node namespace and show that it works",
        description="Creates a node namespace with a client on its uplink and three pod "
        "namespaces, attaches the pods with pycni's bridge + host-local + portmap chain "
        "through the runtime library, serves HTTP from one pod on a host port, then shows "
        "addresses, a ping matrix, the HTTP answers, ADD timings and the topology. "
        "Nothing outside the demo's namespaces and state directory is touched. "
        "Exit code 1 when a check failed.",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the demo running (state in /run/pycni-demo); remove it with --down",
    )
    parser.add_argument("--down", action="store_true", help="remove a demo kept with --keep")
    parser.add_argument(
        "--mode",
        choices=("auto", "daemon", "inprocess"),
        default="auto",
        help="daemon: entry points forwarding to the daemon on the default socket, or to one "
        "started for this run (and stopped after), plus one in-process ADD to compare; "
        "inprocess: every call a Python start-up (auto: daemon)",
    )
    parser.add_argument(
        "--state-dir",
        help="where the demo keeps its files (default: a temp dir, or /run/pycni-demo with --keep)",
    )
    parser.add_argument(
        "--prefix", default="pycni-demo-", help="name prefix of the demo's namespaces"
    )
    parser.add_argument(
        "--plugin-dir", help="use the plugins in this dir instead of installing pycni's"
    )
    parser.add_argument(
        "--svg",
        metavar="FILE",
        help="also write the node's topology diagram (as `pycni inspect --svg`) to FILE",
    )
    parser.set_defaults(func=run)


def _section(out: TextIO, title: str) -> None:
    out.write(f"\n{title}\n")


def _report(outcome: Any, topology: str, out: TextIO) -> None:
    from pycni.demo import network

    _section(out, "Pods")
    for pod in outcome.pods:
        extra = ""
        if pod is outcome.pods[0]:
            extra = (
                f"  web server on :{network.CONTAINER_PORT}, "
                f"published on node port {network.HOST_PORT}"
            )
        shown = pod.address or f"FAILED: {pod.error}"
        out.write(f"  {pod.name:<24} {shown:<16} ADD {pod.add_ms:6.1f} ms{extra}\n")

    _section(out, "Ping matrix (rows ping columns)")
    names = [p.name for p in outcome.pods if p.address]
    columns = [*names, "gateway"]
    width = max([len(c) for c in columns] + [8]) + 2
    out.write(" " * width + "".join(c.ljust(width) for c in columns) + "\n")
    for src in names:
        cells = []
        for dst in columns:
            if dst == src:
                cells.append("-".ljust(width))
            else:
                cells.append(("ok" if outcome.matrix.get((src, dst)) else "FAIL").ljust(width))
        out.write(src.ljust(width) + "".join(cells).rstrip() + "\n")

    _section(out, f"HTTP through host port {network.HOST_PORT}")
    for who, target, answer in outcome.http:
        out.write(f"  {who:<7} -> {target:<22} {answer}\n")

    _section(out, "ADD timings (loopback + bridge/host-local/portmap chain)")
    times = [p.add_ms for p in outcome.pods if p.address]
    mode = outcome.state.mode
    if mode == "daemon":
        mode += ", started for this run" if outcome.state.daemon_pid else ", already running"
    if times:
        out.write(
            f"  {len(times)} pods: min {min(times):.1f} ms, max {max(times):.1f} ms, "
            f"mean {sum(times) / len(times):.1f} ms (mode: {mode})\n"
        )
    slow = outcome.inprocess
    if slow is not None:
        shown = f"{slow.add_ms:.1f} ms" if not slow.error else f"FAILED: {slow.error}"
        out.write(f"  1 pod in-process (no daemon, for comparison): {shown}\n")

    _section(out, "Topology")
    out.write(topology)

    failed = [c for c in outcome.checks if not c.ok]
    _section(out, f"Checks: {len(outcome.checks) - len(failed)} passed, {len(failed)} failed")
    for check in failed:
        out.write(f"  FAILED {check.name}: {check.detail}\n")


def _topology(state: Any, svg: str | None = None) -> str:
    from pycni.daemon.protocol import DEFAULT_SOCKET
    from pycni.demo import topology
    from pycni.inspect import leaks, render_svg
    from pycni.inspect.collect import Paths, collect
    from pycni.inspect.daemon import read_daemon
    from pycni.net.ns import NetNS
    from pycni.playground import netns_path

    with NetNS.open(netns_path(state.node)) as ns, ns.entered():
        node_state = collect(Paths(state.conf_dir, state.cache_dir, state.data_dir))
    if svg:
        from pycni.inspect.daemon import choose_socket

        dirs = [state.plugin_dir] if state.plugin_dir else []
        sock, why = choose_socket(state.socket or None, dirs, DEFAULT_SOCKET)
        if state.mode == "daemon":
            node_state.daemon = read_daemon(sock, plugin_dirs=dirs)
            node_state.daemon.chosen_because = why
        else:  # these entry points never ask a daemon, whatever runs on the default socket
            from pycni.inspect.daemon import entry_point_dirs
            from pycni.inspect.model import DaemonStatus

            node_state.daemon = DaemonStatus(
                socket="(none: the demo's entry points never use a daemon)",
                here="in-process: the demo installed in-process entry points",
                entry_points=entry_point_dirs(dirs, ""),
            )
        with open(svg, "w", encoding="utf-8") as f:
            f.write(render_svg.render(node_state, leaks.find_leaks(node_state)))
    return topology.render(node_state, state.client)


def _this_command() -> str:
    """How to run this pycni again from any shell: the console script next to this
    interpreter (a venv's is not on PATH), else the module."""
    script = os.path.join(os.path.dirname(sys.executable), "pycni")
    if os.access(script, os.X_OK):
        return script
    return f"{sys.executable} -m pycni.cli.main"


def _down(args: argparse.Namespace, out: TextIO) -> int:
    from pycni.demo import run as demo

    root = args.state_dir or demo.KEEP_DIR
    try:
        state = demo.DemoState.load(root)
    except (OSError, ValueError, TypeError):
        out.write(f"no kept demo in {root}: nothing to remove\n")
        return 0
    problems = demo.down(state, demo.Progress(out))
    for problem in problems:
        sys.stderr.write(f"warning: {problem}\n")
    out.write("demo removed\n")
    return 0


def run(args: argparse.Namespace) -> int:
    from pycni.demo import run as demo

    out = sys.stdout
    if os.geteuid() != 0:
        sys.stderr.write("pycni demo needs root (it creates network namespaces)\n")
        return 2
    if args.down:
        return _down(args, out)
    try:
        state = demo.new_state(args.keep, args.state_dir, args.prefix)
    except demo.DemoError as exc:
        sys.stderr.write(f"pycni demo: {exc}\n")
        return 2
    progress = demo.Progress(out)
    ok = False
    try:
        outcome = demo.up(state, out, mode=args.mode, plugin_dir=args.plugin_dir)
        progress("reading the topology back (as `pycni inspect` does)")
        topology = _topology(state, args.svg)
        _report(outcome, topology, out)
        ok = outcome.ok
    except demo.DemoError as exc:
        sys.stderr.write(f"pycni demo: {exc}\n")
        if os.path.exists(os.path.join(state.root, demo.STATE_FILE)) and not args.keep:
            demo.down(state)
        return 2
    except BaseException:
        if not args.keep:
            demo.down(state)
        raise
    out.write("\n")
    if args.keep:
        from pycni.playground import netns_path

        me = _this_command()
        out.write(
            f"The demo is still up (state in {state.root}). Look around with:\n"
            f"  nsenter --net={netns_path(state.node)} {me} inspect "
            f"--netconf-dir {state.conf_dir} --cache-dir {state.cache_dir} "
            f"--data-dir {state.data_dir} --cni-path {state.plugin_dir}\n"
            f"Remove it with:\n  {me} demo --down"
            + (f" --state-dir {state.root}" if args.state_dir else "")
            + "\n"
        )
    else:
        progress("cleaning up")
        problems = demo.down(state, progress)
        for problem in problems:
            sys.stderr.write(f"warning: {problem}\n")
        ok = ok and not problems
    return 0 if ok else 1
