#!/usr/bin/env python3
"""Where the wall time of one chain call goes (issue #37), beside the Go plugins and the floors.

One loopback + bridge/host-local chain per pod, each plugin exec'd from inside a private node
namespace as a runtime does (the bench thread enters the node, the plugin inherits it; never
the machine's own namespace). Every implementation gets its own node with ``--pods`` pods
already on its bridge; then ``--n`` times, interleaved over the implementations, one more pod
gets ADD, CHECK and DEL (so the bridge keeps its pods). Implementations: the Go plugins of
/usr/lib/cni (v1.1.1) and v1.9.1 (tests/references.py; PYCNI_UPSTREAM or ../shared/upstream),
pycni through the C entry points and its daemon, pycni in-process (no daemon).

The daemon is started with pycni.daemon.phases installed: per call it books the exclusive time
of decode, each plugin, host-local's store, fsync, sysctl, setns, netlink (requests and reads
counted), result encode. Together with the daemon's own record (recv incl. the HELLO round trip,
queue, run, send) and the exec wall time seen here, every exec is split into parts. Interleaved
with the calls, the floors: the exec of a C program that exits at once, the same number of
fsyncs and of netlink round trips issued by that program (bench/breakdown_floor.c, compiled
here), and the kernel steps of a bridge pod in-process (scale_curve.KernelFloor).

    .venv/bin/python bench/breakdown.py [--n 50] [--pods 10] [--plot docs/benchmarks-breakdown.png]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import scale_curve  # noqa: E402
from run import Impl, confs, inside  # noqa: E402

import references  # noqa: E402
from pycni.daemon import client as fast_client  # noqa: E402
from pycni.daemon import protocol  # noqa: E402
from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402

PREFIX = f"pbrk{os.getpid() % 10000}-"
VERBS = ("ADD", "CHECK", "DEL")
CHAIN = (("loopback", "lo"), ("bridge", "eth0"))
OURS = ("pycni-daemon", "pycni-inprocess")
MARK_START, MARK_END = "<!-- breakdown:start -->", "<!-- breakdown:end -->"

# The stacked parts of a daemon chain call, in drawing order: (label, how to get it per exec).
PARTS = (
    "entry point: exec, start, connect, HELLO, reply read, exit",
    "daemon recv (HELLO ack, request read + decode)",
    "daemon queue + main loop",
    "daemon send",
    "worker: setns + call control",
    "config decode",
    "plugin logic (Python)",
    "ipam store (files, lock)",
    "fsync",
    "sysctl",
    "netlink requests",
    "netlink socket open/close",
    "result encode",
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def spread(values: list[float]) -> str:
    """p50 [p10-p90] of ``values`` (ms)."""
    return f"{pct(values, 0.5):.2f} [{pct(values, 0.1):.2f}-{pct(values, 0.9):.2f}]"


def timed_exec(
    argv: list[str], env: dict[str, str], stdin: bytes
) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    return (time.perf_counter() - start) * 1000, proc


class Chain:
    """Runs one implementation's chain for a pod and keeps each exec's wall time."""

    def __init__(self, impl: Impl) -> None:
        self.impl = impl
        self.walls: dict[str, list[float]] = defaultdict(list)  # "VERB" or "VERB plugin"
        self.execs: list[tuple[str, str, str, float]] = []  # cid, plugin, verb, ms

    def env(self, plugin_dir: Path, verb: str, cid: str, netns: str, ifname: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": verb,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": netns,
            "CNI_IFNAME": ifname,
            "CNI_PATH": str(plugin_dir),
            "CNI_ARGS": "",
        }

    def run(self, verb: str, cid: str, netns: str, record: bool = True) -> None:
        lo, bridge, _portmap = confs(self.impl, None)
        order = CHAIN if verb != "DEL" else CHAIN[::-1]
        total = 0.0
        with inside(f"/run/netns/{self.impl.node}"):
            for plugin, ifname in order:
                conf = dict(lo if plugin == "loopback" else bridge)
                if verb != "ADD":
                    conf["prevResult"] = self.impl.results[cid]
                env = self.env(self.impl.plugin_dir, verb, cid, netns, ifname)
                argv = [str(self.impl.plugin_dir / plugin)]
                ms, proc = timed_exec(argv, env, json.dumps(conf).encode())
                if proc.returncode != 0:
                    raise RuntimeError(f"{self.impl.label} {plugin} {verb}: {proc.stdout!r}")
                if verb == "ADD" and plugin == "bridge":
                    self.impl.results[cid] = json.loads(proc.stdout)
                total += ms
                if record:
                    self.walls[f"{verb} {plugin}"].append(ms)
                    self.execs.append((cid, plugin, verb, ms))
        if record:
            self.walls[verb].append(total)
        if verb == "DEL":
            self.impl.results.pop(cid, None)


def hello_round_trip(socket_path: str) -> float:
    """One connect + HELLO + acknowledgement, as the forwarder does it (ms)."""
    start = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(socket_path)
        sock.sendall(
            struct.pack(">4sBBHII", protocol.MAGIC, protocol.VERSION, protocol.KIND_HELLO, 0, 0, 0)
        )
        got = b""
        while len(got) < 20:
            chunk = sock.recv(20 - len(got))
            if not chunk:
                break
            got += chunk
    return (time.perf_counter() - start) * 1000


def floor_run(floor_bin: Path, args: list[str]) -> float:
    """ms the floor program reports for its work (its own clock, exec excluded)."""
    proc = subprocess.run([str(floor_bin), *args], capture_output=True, check=True)
    return int(proc.stdout) / 1e6


def split_daemon(
    wall: float, daemon: dict[str, float], phases: dict[str, float]
) -> dict[str, float]:
    """One daemon exec's wall time as PARTS (ms); the entry point's part is all of the exec's
    wall time outside the daemon's record of the call (accept to reply sent)."""
    total = daemon.get("total", 0.0)
    run = daemon.get("run", 0.0)
    plugin = sum(v for k, v in phases.items() if k.startswith("plugin:"))
    booked = sum(phases.values())
    parts = {
        "entry point: exec, start, connect, HELLO, reply read, exit": wall - total,
        "daemon recv (HELLO ack, request read + decode)": daemon.get("recv", 0.0),
        "daemon queue + main loop": total - daemon.get("recv", 0.0) - run - daemon.get("send", 0.0),
        "daemon send": daemon.get("send", 0.0),
        "worker: setns + call control": phases.get("call", 0.0)
        + phases.get("setns", 0.0)
        + max(0.0, run - booked),
        "config decode": phases.get("decode", 0.0),
        "plugin logic (Python)": plugin,
        "ipam store (files, lock)": phases.get("ipam-store", 0.0),
        "fsync": phases.get("fsync", 0.0),
        "sysctl": phases.get("sysctl-read", 0.0) + phases.get("sysctl-write", 0.0),
        "netlink requests": phases.get("netlink", 0.0),
        "netlink socket open/close": phases.get("netlink-open", 0.0)
        + phases.get("netlink-close", 0.0),
        "result encode": phases.get("encode", 0.0),
    }
    return {k: max(0.0, v) for k, v in parts.items()}


def import_costs(impl: Impl, cid: str, netns: str) -> list[tuple[str, float, float]]:
    """(module, self ms, cumulative ms) of one in-process bridge CHECK, by ``-X importtime``."""
    _lo, bridge, _ = confs(impl, None)
    conf = {**bridge, "prevResult": impl.results[cid]}
    chain = Chain(impl)
    env = chain.env(impl.plugin_dir, "CHECK", cid, netns, "eth0")
    script = impl.plugin_dir / "bridge"
    interpreter = script.read_text().splitlines()[0][2:].split()  # "#!python -IS"
    argv = [*interpreter, "-X", "importtime", str(script)]
    with inside(f"/run/netns/{impl.node}"):
        _ms, proc = timed_exec(argv, env, json.dumps(conf).encode())
    rows: list[tuple[str, float, float]] = []
    for line in proc.stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = (part.strip() for part in line[12:].split("|", 2))
        rows.append((name, int(own) / 1000, int(cumulative) / 1000))
    return rows


def wrapper_overhead_us(n: int = 20000) -> dict[str, float]:
    """µs per call a wrapped function costs: bare, wrapped with no call booked, and booked."""
    from pycni.daemon import phases

    class Box:
        def f(self) -> None:
            return None

    box = Box()

    def loop() -> float:
        start = time.perf_counter()
        for _ in range(n):
            box.f()
        return (time.perf_counter() - start) / n * 1e6

    bare = min(loop() for _ in range(5))
    phases._wrap(Box, "f", "f")
    try:
        idle = min(loop() for _ in range(5))
        phases._local.ledger = phases.Ledger({})
        booked = min(loop() for _ in range(5))
    finally:
        phases._local.ledger = None
        phases.uninstall()
    return {"bare": bare, "wrapped, no call booked": idle, "wrapped, booked": booked}


FLOOR_PARTS = ("2 execs of a C program", "kernel steps (KernelFloor)", "2 fsyncs (C)")


def typical(chain_of: dict[tuple[str, str], dict[str, float]], verb: str) -> dict[str, float]:
    """The mean of each part over the middle fifth (at least 3) of a verb's chain calls by
    wall time: a call near the p50 whose parts add up, for the stacked bar."""
    calls = sorted(
        (v for (_cid, vb), v in chain_of.items() if vb == verb), key=lambda p: sum(p.values())
    )
    if not calls:
        return dict.fromkeys(PARTS, 0.0)
    width = max(3, len(calls) // 5)
    start = max(0, len(calls) // 2 - width // 2)
    middle = calls[start : start + width]
    return {part: sum(c.get(part, 0.0) for c in middle) / len(middle) for part in PARTS}


def median_imports(runs: list[list[tuple[str, float, float]]]) -> list[tuple[str, float, float]]:
    """Per module, the median own and cumulative ms over the runs (their first run's order)."""
    own: dict[str, list[float]] = defaultdict(list)
    cumulative: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for name, o, c in run:
            own[name].append(o)
            cumulative[name].append(c)
    return [
        (name, statistics.median(own[name]), statistics.median(cumulative[name])) for name in own
    ]


def draw(
    path: Path,
    stacks: dict[str, dict[str, float]],
    walls: dict[str, dict[str, float]],
    floor_stacks: dict[str, dict[str, float]],
) -> None:
    """Stacked bars per verb: pycni-daemon's parts, the walls beside, the floors stacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verbs = [v for v in ("ADD", "DEL") if v in stacks]
    fig, axes = plt.subplots(1, len(verbs), figsize=(11, 5.6))
    colors = plt.get_cmap("tab20").colors
    grey = ("0.25", "0.5", "0.75")
    for ax, verb in zip(axes, verbs, strict=True):
        labels = [
            "pycni-daemon\nparts (typical)",
            *(n.replace(" ", "\n", 1) for n in walls[verb]),
            "floor",
        ]
        bottom = 0.0
        for i, part in enumerate(PARTS):
            value = stacks[verb].get(part, 0.0)
            ax.bar(
                0, value, bottom=bottom, color=colors[i % 20], label=part if ax is axes[0] else None
            )
            bottom += value
        ax.text(0, bottom, f"{bottom:.1f}", ha="center", va="bottom", fontsize=8)
        for j, value in enumerate(walls[verb].values(), start=1):
            ax.bar(j, value, color="0.6" if j > 1 else "tab:blue")
            ax.text(j, value, f"{value:.1f}", ha="center", va="bottom", fontsize=8)
        x, bottom = len(labels) - 1, 0.0
        for i, part in enumerate(FLOOR_PARTS):
            value = floor_stacks[verb].get(part, 0.0)
            label = f"floor: {part}" if ax is axes[0] else None
            ax.bar(x, value, bottom=bottom, color=grey[i], hatch="//", label=label)
            bottom += value
        ax.text(x, bottom, f"{bottom:.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_title(f"{verb}: loopback + bridge/host-local chain (p50 ms)", fontsize=10)
        ax.set_ylabel("ms")
    fig.legend(loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=50, help="measured pods per implementation (50)")
    parser.add_argument("--pods", type=int, default=10, help="pods already on each bridge (10)")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "benchmarks-breakdown.png"))
    parser.add_argument(
        "--doc",
        default=str(ROOT / "docs" / "benchmarks.md"),
        help="markdown file whose breakdown section is replaced ('' for none)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("breakdown: must run as root", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="pycni-breakdown-", dir="/var/tmp"))
    floor_bin = work / "floor"
    subprocess.run(
        ["cc", "-O2", "-o", str(floor_bin), str(ROOT / "bench/breakdown_floor.c")], check=True
    )
    socket_path = str(work / "pycni.sock")
    phases_out = work / "phases.jsonl"
    inproc_dir, daemon_dir = work / "inprocess", work / "daemon"
    fast_install.install(inproc_dir, form="inprocess")
    report = fast_install.install(daemon_dir, form="auto", socket_path=socket_path)
    launcher = (
        "import sys; from pycni.daemon import phases; phases.install(sys.argv[1]); "
        "from pycni.cli.main import main; sys.exit(main(sys.argv[2:]))"
    )
    daemon = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/python"),
            "-c",
            launcher,
            str(phases_out),
            "daemon",
            "--socket",
            socket_path,
            "--log-level",
            "WARNING",
        ]
    )
    impls = [Impl("go v1.1.1", references.DEBIAN_DIR)]
    if "v1.9.1" in references.available():
        impls.append(Impl("go v1.9.1", references.reference("v1.9.1").plugin_dir))
    impls += [Impl("pycni-daemon", daemon_dir), Impl("pycni-inprocess", inproc_dir)]
    chains = {impl.label: Chain(impl) for impl in impls}
    nodes: list[str] = []
    pod_names: list[str] = []
    counter = 0
    daemon_recs: dict[tuple[str, str, str], dict[str, float]] = {}
    floors: dict[str, list[float]] = defaultdict(list)
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    def new_pod() -> tuple[str, str]:
        nonlocal counter
        counter += 1
        name = f"{PREFIX}p{counter}"
        pod_names.append(name)
        return f"brk{counter}", create_netns(name)

    def collect_daemon() -> None:
        for rec in fast_client.stats(socket_path)["recent"]:
            key = (rec.get("container_id", ""), rec.get("plugin_type", ""), rec.get("command", ""))
            daemon_recs[key] = rec

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                fast_client.stats(socket_path)
                break
            except (OSError, fast_client.DaemonUnavailable):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        for impl in impls:
            counter += 1
            impl.node = f"{PREFIX}n{counter}"
            nodes.append(impl.node)
            create_netns(impl.node)
            impl.data_dir = work / impl.node
            impl.data_dir.mkdir()
        counter += 1
        floor_node = f"{PREFIX}floor{counter}"
        nodes.append(floor_node)
        create_netns(floor_node)
        kernel_floor = scale_curve.KernelFloor(f"/run/netns/{floor_node}", pycni_port=True)
        kernel_floor.setup()
        fsync_dir = work / "fsync-floor"
        fsync_dir.mkdir()
        print(
            f"breakdown: {len(impls)} implementations, {args.pods} pods each, then {args.n} "
            f"measured; entry-point form {report.form}",
            file=sys.stderr,
        )
        for k in range(args.pods + 2):  # the resident pods; the last two are warm-up, removed
            for impl in impls:
                cid, path = new_pod()
                chains[impl.label].run("ADD", cid, path, record=False)
                if k >= args.pods:
                    chains[impl.label].run("DEL", cid, path, record=False)
            if k < args.pods:
                _, path = new_pod()
                kernel_floor.add(k, path)
        for k in range(args.n):
            for impl in impls:
                if (
                    impl.label == "pycni-daemon"
                ):  # its floors just before it, not after a Python exit
                    exec_ms, _ = timed_exec([str(floor_bin), "true"], {}, b"")
                    floors["exec of a C program that exits"].append(exec_ms)
                    floors["connect + HELLO round trip from Python"].append(
                        hello_round_trip(socket_path)
                    )
                cid, path = new_pod()
                chain = chains[impl.label]
                for verb in VERBS:
                    chain.run(verb, cid, path)
                    if impl.label == "pycni-daemon":
                        collect_daemon()
            _, path = new_pod()
            floors["kernel steps of a bridge pod ADD (KernelFloor)"].append(
                kernel_floor.add(args.pods + k, path)
            )
            floors["kernel steps of its DEL"].append(kernel_floor.delete(path))
            with inside(f"/run/netns/{floor_node}"):
                floors["netlink round trip, one RTM_GETLINK (µs)"].append(
                    floor_run(floor_bin, ["netlink", "20"]) / 20 * 1000
                )
            floors["create + fsync 1 file, fsync the dir (C)"].append(
                floor_run(floor_bin, ["fsync", str(fsync_dir), "1"])
            )
            floors["unlink 1 file, fsync the dir (C)"].append(
                floor_run(floor_bin, ["unlink", str(fsync_dir), "1"])
            )
            if k % 10 == 9:
                print(f"breakdown: {k + 1}/{args.n}", file=sys.stderr)
        inproc = next(i for i in impls if i.label == "pycni-inprocess")
        cid, path = new_pod()
        chains[inproc.label].run("ADD", cid, path, record=False)
        imports = median_imports([import_costs(inproc, cid, path) for _ in range(5)])
        interpreter = (inproc.plugin_dir / "bridge").read_text().splitlines()[0][2:].split()
        bare_start = statistics.median(
            timed_exec([*interpreter, "-c", "pass"], {}, b"")[0] for _ in range(5)
        )
        chains[inproc.label].run("DEL", cid, path, record=False)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        for name in [*pod_names, *nodes]:
            delete_netns(name)
    load_after = os.getloadavg()
    booked: dict[tuple[str, str, str], dict[str, object]] = {}
    for line in phases_out.read_text().splitlines():
        entry = json.loads(line)
        booked[(entry["containerId"], entry["plugin"], entry["command"])] = entry
    shutil.rmtree(work, ignore_errors=True)

    exec_floor = pct(floors["exec of a C program that exits"], 0.5)
    parts: dict[str, dict[str, list[float]]] = {v: defaultdict(list) for v in VERBS}
    counts: dict[str, dict[str, list[float]]] = {v: defaultdict(list) for v in VERBS}
    per_plugin: dict[str, list[float]] = defaultdict(list)
    chain_of: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    count_of: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for cid, plugin, verb, wall in chains["pycni-daemon"].execs:
        rec = daemon_recs.get((cid, plugin, verb), {})
        entry = booked.get((cid, plugin, verb), {})
        phases = dict(entry.get("phasesMs", {}))  # type: ignore[call-overload]
        for name, value in phases.items():
            if name.startswith("plugin:"):
                per_plugin[f"{verb} {name[7:]}"].append(value)
        for part, value in split_daemon(wall, rec, phases).items():
            chain_of[(cid, verb)][part] += value
        for name, value in dict(entry.get("counts", {})).items():  # type: ignore[call-overload]
            count_of[(cid, verb)][name] += value
    for (_cid, verb), values in chain_of.items():
        for part, value in values.items():
            parts[verb][part].append(value)
    for (_cid, verb), values in count_of.items():
        for name, value in values.items():
            counts[verb][name].append(value)

    gos = [i.label for i in impls if i.label.startswith("go ")]
    lines = [
        f"Run of {started} (`bench/breakdown.py --n {args.n} --pods {args.pods}`), load average "
        f"{load_before[0]:.1f} at the start and {load_after[0]:.1f} at the end on 2 CPUs shared "
        "with other engineers' test runs: wall times are noisy, so each value is the median "
        "(p50) with [p10-p90] over the measured pods, and the implementations ran interleaved. "
        f"Entry-point form: {report.form}.",
        "",
        "Chain wall time per verb (ms, p50 [p10-p90]):",
        "",
        "| verb | "
        + " | ".join(i.label for i in impls)
        + " | "
        + " | ".join(f"{ours} / {go}" for go in gos for ours in OURS)
        + " |",
        "|---|" + "---|" * (len(impls) + len(gos) * len(OURS)),
    ]
    walls: dict[str, dict[str, float]] = {}
    for verb in VERBS:
        row = [spread(chains[i.label].walls[verb]) for i in impls]
        ratios = [
            pct(chains[ours].walls[verb], 0.5) / pct(chains[go].walls[verb], 0.5)
            for go in gos
            for ours in OURS
        ]
        lines.append(
            f"| {verb} | "
            + " | ".join(row)
            + " | "
            + " | ".join(f"{r:.2f}x" for r in ratios)
            + " |"
        )
        ours = pct(chains["pycni-daemon"].walls[verb], 0.5)
        walls[verb] = {"pycni-daemon wall": ours}
        walls[verb] |= {
            i.label: pct(chains[i.label].walls[verb], 0.5)
            for i in impls
            if i.label.startswith("go ")
        }
    lines += [
        "",
        "pycni-daemon's chain split into parts (ms per chain call): p50 [p10-p90] of each part "
        "over the pods (the p50s need not add up to the chain's p50), then / the typical call: "
        "the mean of each part over the middle fifth of the chain calls by wall time, which "
        "adds up to about the p50 wall time (the chart's stacked bar):",
        "",
        "| part | " + " | ".join(VERBS) + " |",
        "|---|" + "---|" * len(VERBS),
    ]
    stacks = {verb: typical(chain_of, verb) for verb in VERBS}
    for part in PARTS:
        lines.append(
            f"| {part} | "
            + " | ".join(f"{spread(parts[v][part])} / {stacks[v][part]:.2f}" for v in VERBS)
            + " |"
        )
    lines.append(
        "| sum | "
        + " | ".join(
            f"{sum(pct(parts[v][p], 0.5) for p in PARTS):.2f} / {sum(stacks[v].values()):.2f}"
            for v in VERBS
        )
        + " |"
    )
    lines += [
        "",
        "Each plugin's own Python logic, exclusive of the parts above (ms, p50 [p10-p90]):",
        "",
    ]
    lines += [f"- {name}: {spread(values)}" for name, values in sorted(per_plugin.items())]
    lines += [
        "",
        "Counted per chain call (p50 over the pods):",
        "",
        "| count | " + " | ".join(VERBS) + " |",
        "|---|" + "---|" * len(VERBS),
    ]
    for name in (
        "netlink",
        "netlink-reads",
        "netlink-open",
        "fsync",
        "sysctl-read",
        "sysctl-write",
        "setns",
    ):
        lines.append(
            f"| {name} | " + " | ".join(f"{pct(counts[v][name], 0.5):.0f}" for v in VERBS) + " |"
        )
    lines += ["", "Floors (ms, p50 [p10-p90], measured interleaved with the calls):", ""]
    lines += [f"- {name}: {spread(values)}" for name, values in floors.items()]
    total_imports = sum(own for _n, own, _c in imports)
    lines += [
        "",
        f"Cold path of the in-process entry point (a bridge CHECK under `-X importtime`, median "
        "of 5 runs): "
        f"{len(imports)} modules, {total_imports:.1f} ms of imports; the 15 costliest by own time "
        "(ms own / cumulative):",
        "",
    ]
    for name, own, cumulative in sorted(imports, key=lambda r: -r[1])[:15]:
        lines.append(f"- `{name.strip()}`: {own:.2f} / {cumulative:.2f}")
    inproc_walls = chains["pycni-inprocess"].walls
    lines += ["", ""]
    lines[-1] = (
        f"Beside it: the bare interpreter's start and exit (`python -IS -c pass`, median of 5) "
        f"{bare_start:.1f} ms; one in-process exec, p50: loopback ADD "
        f"{pct(inproc_walls['ADD loopback'], 0.5):.1f} ms, bridge ADD "
        f"{pct(inproc_walls['ADD bridge'], 0.5):.1f} ms (Go v1.1.1: "
        f"{pct(chains['go v1.1.1'].walls['ADD loopback'], 0.5):.1f} and "
        f"{pct(chains['go v1.1.1'].walls['ADD bridge'], 0.5):.1f} ms)."
    )
    overhead = wrapper_overhead_us()
    wrapped_calls = pct([sum(c.values()) for c in count_of.values()], 0.5)
    lines += [
        "",
        "What the instrumentation costs: off (the default) nothing, the module is not even "
        "imported; installed, per wrapped call (µs, best of 5 x 20000): "
        + ", ".join(f"{k} {v:.2f}" for k, v in overhead.items())
        + f"; about {wrapped_calls:.0f} wrapped calls per chain call, so some "
        f"{wrapped_calls * (overhead['wrapped, booked'] - overhead['bare']) / 1000:.2f} ms of the "
        "times above are the bookkeeping's own.",
    ]
    fsync_floor = pct(floors["create + fsync 1 file, fsync the dir (C)"], 0.5)
    floor_stacks = {
        verb: {
            "2 execs of a C program": len(CHAIN) * exec_floor,
            "kernel steps (KernelFloor)": pct(floors[kernel], 0.5),
            "2 fsyncs (C)": fsync_floor if verb == "ADD" else 0.0,
        }
        for verb, kernel in (
            ("ADD", "kernel steps of a bridge pod ADD (KernelFloor)"),
            ("DEL", "kernel steps of its DEL"),
        )
    }
    lines += [
        "",
        "The floor of each verb, stacked (ms): "
        + "; ".join(
            f"{verb} {sum(f.values()):.2f} ("
            + ", ".join(f"{k} {v:.2f}" for k, v in f.items())
            + f"), pycni-daemon's p50 {pct(chains['pycni-daemon'].walls[verb], 0.5):.2f} = "
            f"{pct(chains['pycni-daemon'].walls[verb], 0.5) / sum(f.values()):.2f}x of it"
            for verb, f in floor_stacks.items()
        ),
    ]
    text = "\n".join(lines)
    print(text)
    draw(Path(args.plot), stacks, walls, floor_stacks)
    if args.doc:
        doc = Path(args.doc)
        body = doc.read_text() if doc.exists() else ""
        image = f"![where the time goes]({Path(args.plot).name})"
        section = f"{MARK_START}\n\n{image}\n\n{text}\n\n{MARK_END}"
        if MARK_START in body and MARK_END in body:
            head, rest = body.split(MARK_START, 1)
            body = head + section + rest.split(MARK_END, 1)[1]
        else:
            body = body.rstrip() + "\n\n## Where the time goes\n\n" + section + "\n"
        doc.write_text(body)
        print(f"breakdown: written to {doc} and {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
