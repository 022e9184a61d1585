#!/usr/bin/env python3
"""`make bench`, startup rows: what a node without a running daemon pays, and autostart.

Rows (appended to docs/benchmarks.md under "Startup, autostart and the cold path", replacing
an earlier copy of that section; bench/run.py rewrites the rest of the file):
  1. autostart: from no daemon to the first call answered (it runs in-process) and to the
     first call answered by the daemon that call started; the first call with and without
     autostart (what starting the daemon costs the caller)
  2. in-process ADD/DEL (loopback + bridge + host-local, no port mapping) vs the Go chain, in
     ms and (with valgrind installed) in user-space instructions, which the load does not move
  3. import time per plugin in-process (`python -X importtime`, VERSION)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.daemon import client  # noqa: E402
from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402
from pycni.skel import registry  # noqa: E402

GO_DIR = Path("/usr/lib/cni")
PREFIX = f"pbst{os.getpid() % 10000}-"
HEADING = "## Startup, autostart and the cold path"
ENV_BASE = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


Measure = Callable[[Path, dict[str, str], bytes], float]


def run_entry(path: Path, env: dict[str, str], stdin: bytes = b"") -> float:
    start = time.perf_counter()
    proc = subprocess.run([str(path)], input=stdin, env=env, capture_output=True, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{path} failed: {proc.stdout!r} {proc.stderr!r}")
    return elapsed


_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(logdir: Path) -> Measure:
    """A measure: millions of user-space instructions of one exec and of every process it
    starts (valgrind's cachegrind), the same whatever else the machine is running."""
    valgrind = shutil.which("valgrind")
    assert valgrind is not None

    def count(path: Path, env: dict[str, str], stdin: bytes = b"") -> float:
        for old in logdir.glob("vg.*"):
            old.unlink()
        argv = [
            valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
            "--trace-children=yes", f"--log-file={logdir}/vg.%p", str(path),
        ]  # fmt: skip
        proc = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{path} failed under valgrind: {proc.stdout!r} {proc.stderr!r}")
        total = 0
        for log in logdir.glob("vg.*"):
            found = _IREFS.search(log.read_text())
            total += int(found.group(1).replace(",", "")) if found else 0
        return total / 1e6

    return count


def kill_daemons(sock: str) -> None:
    """SIGKILL the processes serving ``sock`` (found by the path in their command line)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if sock.encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def served_calls(sock: str) -> int:
    try:
        return int(client.stats(sock, timeout=2)["counts"]["calls"])
    except (client.DaemonUnavailable, OSError, ValueError):
        return 0


def autostart_round(work: Path, autostart: bool) -> tuple[float, float]:
    """(ms to the first call answered, ms to the first call answered by the daemon)."""
    sock = str(work / "run" / "d.sock")
    bindir = work / "bin"
    fast_install.install(
        bindir, socket_path=sock, form="c", names=["loopback"], autostart=autostart
    )
    env = {**ENV_BASE, "CNI_COMMAND": "VERSION"}
    try:
        start = time.perf_counter()
        run_entry(bindir / "loopback", env)
        first = (time.perf_counter() - start) * 1000
        if not autostart:
            return first, float("nan")
        deadline = start + 60
        while time.perf_counter() < deadline:
            run_entry(bindir / "loopback", env)
            if os.path.exists(sock) and served_calls(sock) >= 1:
                return first, (time.perf_counter() - start) * 1000
        raise RuntimeError("the autostarted daemon never answered")
    finally:
        kill_daemons(sock)


def autostart_rows(rounds: int) -> list[tuple[str, float]]:
    firsts, daemon_firsts, plain = [], [], []
    for i in range(rounds):
        with tempfile.TemporaryDirectory(prefix="pycni-bst") as tmp:
            first, by_daemon = autostart_round(Path(tmp) / f"a{i}", True)
            firsts.append(first)
            daemon_firsts.append(by_daemon)
            plain.append(autostart_round(Path(tmp) / f"n{i}", False)[0])
    return [
        ("first call answered, autostart (it runs in-process), p50 (ms)", median(firsts)),
        ("first call answered, --no-autostart (in-process), p50 (ms)", median(plain)),
        ("first call answered by the autostarted daemon, from no daemon, p50 (ms)",
         median(daemon_firsts)),
    ]  # fmt: skip


def median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def chain_rows(
    work: Path,
    pods: int,
    measure: Measure = run_entry,
    unit: str = "p50 (ms)",
    per_step: dict[tuple[str, str, str], list[float]] | None = None,
) -> list[tuple[str, dict[str, float]]]:
    """Interleaved loopback + bridge/host-local ADD and DEL, each implementation its node;
    ``per_step`` (when given) collects each plugin call's time by (label, verb, plugin)."""
    impls = {"go": GO_DIR, "pycni-inprocess": work / "inprocess"}
    fast_install.install(impls["pycni-inprocess"], form="inprocess")
    times: dict[tuple[str, str], list[float]] = {}
    made: list[str] = []
    try:
        nodes = {}
        for label in impls:
            name = f"{PREFIX}{label}"
            nodes[label] = create_netns(name)
            made.append(name)
        for i in range(pods + 1):  # pod 0 warms the caches up, it is not counted
            for label, plugin_dir in impls.items():
                pod = f"{PREFIX}{label[:2]}{i}"
                path = create_netns(pod)
                made.append(pod)
                base = {"cniVersion": "1.0.0", "name": "bstnet"}
                lo = {**base, "type": "loopback"}
                bridge = {
                    **base, "type": "bridge", "bridge": "cni0", "isGateway": True,
                    "ipam": {"type": "host-local", "dataDir": str(work / f"ipam-{label}"),
                             "ranges": [[{"subnet": "10.98.0.0/16"}]]},
                }  # fmt: skip
                env = {
                    **ENV_BASE, "CNI_CONTAINERID": pod, "CNI_NETNS": path,
                    "CNI_PATH": str(plugin_dir), "CNI_ARGS": "",
                }  # fmt: skip
                steps: dict[tuple[str, str], float] = {}
                with NetNS.open(nodes[label]) as node, node.entered():
                    add = run_chain(plugin_dir, "ADD", env, lo, bridge, measure, steps)
                    delete = run_chain(plugin_dir, "DEL", env, lo, bridge, measure, steps)
                if i and per_step is not None:
                    for (verb, plugin), ms in steps.items():
                        per_step.setdefault((label, verb, plugin), []).append(ms)
                if i:
                    times.setdefault(("ADD", label), []).append(add)
                    times.setdefault(("DEL", label), []).append(delete)
                delete_netns(pod)
    finally:
        for name in reversed(made):
            delete_netns(name)
    rows = []
    for verb in ("ADD", "DEL"):
        rows.append(
            (f"{verb} {unit}, loopback + bridge/host-local, no port mapping",
             {label: median(times[(verb, label)]) for label in impls}),
        )  # fmt: skip
    return rows


def run_chain(
    plugin_dir: Path,
    verb: str,
    env: dict[str, str],
    lo: dict[str, object],
    bridge: dict[str, object],
    measure: Measure = run_entry,
    steps: dict[tuple[str, str], float] | None = None,
) -> float:
    total = 0.0
    order = [("loopback", lo, "lo"), ("bridge", bridge, "eth0")]
    for plugin, conf, ifname in order if verb == "ADD" else reversed(order):
        call_env = {**env, "CNI_COMMAND": verb, "CNI_IFNAME": ifname}
        spent = measure(plugin_dir / plugin, call_env, json.dumps(conf).encode())
        if steps is not None:
            steps[(verb, plugin)] = spent
        total += spent
    return total


# What a call cannot avoid importing, whatever pycni's own code does: os and the C socket and
# struct modules for netlink, ctypes for setns (os.setns is Python 3.12+) and the C JSON codec;
# a bridge call also fcntl (locks), ipaddress (and with it functools and collections) and
# contextlib. The loopback's set is the least any plugin needs.
UNAVOIDABLE_LOOPBACK = "import os, _socket, struct, ctypes, _json"
UNAVOIDABLE_BRIDGE = UNAVOIDABLE_LOOPBACK + ", fcntl, ipaddress, contextlib"


def floor_rows(
    pods: int,
    chain: list[tuple[str, dict[str, float]]],
    per_step: dict[tuple[str, str, str], list[float]],
) -> list[tuple[str, float]]:
    """The least an in-process ADD chain can cost in CPython 3.11: the two interpreter
    start-ups with only the imports no such call avoids, plus the kernel's work (the Go
    bridge's ADD less a Go exec, measured as the Go bridge's VERSION)."""
    python = fast_install.interpreter()
    bare, loopback, bridge, go_exec = [], [], [], []
    version = {**ENV_BASE, "CNI_COMMAND": "VERSION"}
    for _ in range(pods):
        bare.append(_time([python, "-IS", "-c", "pass"]))
        loopback.append(_time([python, "-IS", "-c", UNAVOIDABLE_LOOPBACK]))
        bridge.append(_time([python, "-IS", "-c", UNAVOIDABLE_BRIDGE]))
        go_exec.append(run_entry(GO_DIR / "bridge", version))
    go_bridge = median(per_step[("go", "ADD", "bridge")])
    kernel = max(0.0, go_bridge - median(go_exec))
    go_chain = chain[0][1]["go"]
    floor = median(loopback) + median(bridge) + kernel
    return [
        ("python -IS start-up, nothing imported, p50", median(bare)),
        (f"start-up with what a loopback call cannot avoid (`{UNAVOIDABLE_LOOPBACK}`), p50",
         median(loopback)),
        (f"start-up with what a bridge call cannot avoid (`{UNAVOIDABLE_BRIDGE}`), p50",
         median(bridge)),
        ("the kernel's work of the bridge ADD: Go bridge ADD less a Go exec (its VERSION), p50",
         round(kernel, 1)),
        ("floor of an in-process ADD chain: the two start-ups + the kernel's work",
         round(floor, 1)),
        ("3x the Go ADD chain", round(3 * go_chain, 1)),
    ]  # fmt: skip


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=ENV_BASE, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_rows(rounds: int) -> list[tuple[str, float, float, str]]:
    """(plugin, total import ms, process wall ms, heaviest top-level imports) per plugin."""
    code = fast_install.fallback_code()
    python = fast_install.interpreter()
    out = []
    for name in sorted(registry.names()):
        totals, walls = [], []
        heaviest: dict[str, list[int]] = {}
        for _ in range(rounds):
            start = time.perf_counter()
            proc = subprocess.run(
                [python, "-X", "importtime", "-IS", "-c", code, name],
                env={**ENV_BASE, "CNI_COMMAND": "VERSION"},
                capture_output=True,
                text=True,
                check=False,
            )
            walls.append((time.perf_counter() - start) * 1000)
            total = 0
            for match in _IMPORT_LINE.finditer(proc.stderr):
                self_us, cumulative, indent, module = match.groups()
                total += int(self_us)
                if len(indent) == 1:  # imported by the entry code itself
                    heaviest.setdefault(module, []).append(int(cumulative))
            totals.append(total / 1000)
        typical = {m: statistics.median(us) for m, us in heaviest.items()}
        top = sorted(typical.items(), key=lambda kv: -kv[1])[:3]
        shown = ", ".join(f"{m} {us / 1000:.0f}" for m, us in top)
        out.append((name, median(totals), median(walls), shown))
    return out


def render(
    auto: list[tuple[str, float]],
    chain: list[tuple[str, dict[str, float]]],
    floor: list[tuple[str, float]],
    imports: list[tuple[str, float, float, str]],
    args: argparse.Namespace,
) -> str:
    lines = [
        HEADING,
        "",
        f"Measured by `make bench` (bench/bench_startup.py: {args.rounds} autostart rounds, "
        f"{args.pods} pods, {args.import_rounds} import rounds) on {time.strftime('%Y-%m-%d')}. "
        f"C entry points for the autostart rows (VERSION calls), the in-process form for the "
        f"chains. Load average at the start {args.load:.1f}, at the end {os.getloadavg()[0]:.1f} "
        f"({os.cpu_count()} CPUs): on a shared machine the ms vary run to run, the instruction "
        f"counts do not.",
        "",
        "| measurement | value |",
        "|---|---|",
    ]
    lines += [f"| {label} | {value} |" for label, value in auto]
    lines += [
        "",
        "| measurement | go | pycni-inprocess | pycni-inprocess / go |",
        "|---|---|---|---|",
    ]
    for label, values in chain:
        go, slow = values["go"], values["pycni-inprocess"]
        lines.append(f"| {label} | {go:.1f} | {slow:.1f} | {slow / go:.2f}x |")
    lines += [
        "",
        "The in-process chain is two interpreters (loopback, then bridge, which runs host-local "
        "in its own process): each pays the interpreter's start-up and its imports. The Go "
        "chain's user-space instructions are few: its time is the execs and the kernel's work, "
        "which pycni pays as well. The floor below is what any CPython 3.11 implementation of "
        "this chain pays before its own code runs; where it is above 3x Go, no in-process "
        "ADD can meet 3x. What the cold path imports and why: "
        "[daemon.md](daemon.md#the-in-process-cold-path).",
        "",
        "| the in-process floor | ms |",
        "|---|---|",
    ]
    lines += [f"| {label} | {value} |" for label, value in floor]
    lines += [
        "",
        "Import time of one in-process call (`python -X importtime -IS`, VERSION, median): the "
        "sum of every module's own import time, the whole process, and the heaviest modules "
        "the entry code imports (cumulative ms). VERSION loads the plugin's module, so this is "
        "what every call pays; ADD/DEL add what the plugin imports lazily on its way.",
        "",
        "| plugin | imports (ms) | process (ms) | heaviest imports (ms) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {n} | {total} | {wall} | {top} |" for n, total, wall, top in imports]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if HEADING in text:
        before, rest = text.split(HEADING, 1)
        after = rest.split("\n## ", 1)
        text = before + section + ("\n## " + after[1] if len(after) == 2 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10, help="autostart rounds (10)")
    parser.add_argument("--pods", type=int, default=20, help="pods per implementation (20)")
    parser.add_argument("--import-rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small numbers, to try the bench")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.pods, args.import_rounds = 2, 3, 1
    if os.geteuid() != 0:
        print("bench_startup: must run as root", file=sys.stderr)
        return 1
    args.load = os.getloadavg()[0]
    print("bench_startup: autostart", file=sys.stderr)
    auto = autostart_rows(args.rounds)
    print("bench_startup: in-process chain vs go", file=sys.stderr)
    per_step: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="pycni-bst") as tmp:
        chain = chain_rows(Path(tmp), args.pods, per_step=per_step)
    print("bench_startup: the interpreter's floor", file=sys.stderr)
    floor = floor_rows(args.pods, chain, per_step)
    if shutil.which("valgrind"):
        print("bench_startup: the same chains in instructions (valgrind)", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="pycni-bst") as tmp:
            logs = Path(tmp) / "vg"
            logs.mkdir()
            unit = "user-space instructions (millions)"
            chain += chain_rows(Path(tmp), 1, instructions(logs), unit)
    print("bench_startup: import times", file=sys.stderr)
    imports = import_rows(args.import_rounds)
    section = render(auto, chain, floor, imports, args)
    print(section)
    write_section(Path(args.out), section)
    print(f"bench_startup: written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
