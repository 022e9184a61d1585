#!/usr/bin/env python3
"""The in-process ADD of two trees side by side, and what each module on the cold path costs.

    bench/bench_cold_path.py --tree old=/path/to/other/worktree --tree new=. --pods 60

Each tree (a checkout with its own ``.venv``, pycni installed editable) gets its in-process
entry points for loopback, bridge and host-local and its own node namespace; then, interleaved
over the trees so that a loaded machine slows them alike, each of ``--pods`` pods gets the
loopback + bridge/host-local ADD and DEL, every plugin exec'd from inside the node as a runtime
does (pod 0 warms the caches and is not counted). Printed: the p50 of the ADD and DEL chains
(wall time, and the CPU time of the plugin processes, which the load moves least)
per tree, then, for the last tree, the own (self) import time of every module a bridge ADD
imports, the median of ``--import-rounds`` runs under ``python -X importtime`` (what
docs/benchmarks.md's per-module table is made of).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402

PREFIX = f"pbcp{os.getpid() % 10000}-"
ENV_BASE = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)$", re.M)


def install(tree: Path, directory: Path) -> Path:
    """The tree's own in-process entry points (its venv's interpreter writes them)."""
    code = (
        "import sys; from pycni.entrypoints import install; "
        "install.install(sys.argv[1], form='inprocess', names=['loopback', 'bridge', 'host-local'])"
    )
    subprocess.run([str(tree / ".venv/bin/python"), "-c", code, str(directory)], check=True)
    return directory


def call(entry: Path, env: dict[str, str], config: dict[str, object], trace: bool = False) -> str:
    """Run one entry point; its stderr (the -X importtime report when ``trace``)."""
    argv = [str(entry)]
    if trace:
        argv = [entry.read_text().split("\n", 1)[0][2:].split()[0], "-X", "importtime", "-IS"]
        argv.append(str(entry))
    proc = subprocess.run(
        argv, input=json.dumps(config).encode(), env=env, capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{entry} failed: {proc.stdout!r} {proc.stderr[-2000:]!r}")
    return proc.stderr.decode()


def configs(ipam_dir: Path) -> tuple[dict[str, object], dict[str, object]]:
    base = {"cniVersion": "1.0.0", "name": "bcpnet"}
    bridge = {
        **base, "type": "bridge", "bridge": "cni0", "isGateway": True,
        "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                 "ranges": [[{"subnet": "10.99.0.0/16"}]]},
    }  # fmt: skip
    return {**base, "type": "loopback"}, bridge


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def chain(
    bindir: Path, verb: str, env: dict[str, str], ipam_dir: Path, trace: bool
) -> tuple[float, float]:
    """One pod's loopback + bridge call of ``verb``: its wall time and the CPU time (user +
    system) of its processes, in ms. The CPU time is what a loaded machine moves least."""
    lo, bridge = configs(ipam_dir)
    order = [("loopback", lo, "lo"), ("bridge", bridge, "eth0")]
    start, cpu = time.perf_counter(), _children_cpu()
    for plugin, config, ifname in order if verb == "ADD" else reversed(order):
        call(bindir / plugin, {**env, "CNI_COMMAND": verb, "CNI_IFNAME": ifname}, config, trace)
    return (time.perf_counter() - start) * 1000, (_children_cpu() - cpu) * 1000


def import_costs(bindir: Path, node: str, work: Path, rounds: int) -> dict[str, float]:
    """Module -> median own import time (us) of a bridge ADD's process."""
    own: dict[str, list[int]] = {}
    _, bridge = configs(work / "ipam-trace")
    with NetNS.open(node) as ns, ns.entered():
        for i in range(rounds):
            pod = f"{PREFIX}t{i}"
            path = create_netns(pod)
            env = {
                **ENV_BASE, "CNI_CONTAINERID": pod, "CNI_NETNS": path,
                "CNI_PATH": str(bindir), "CNI_ARGS": "", "CNI_IFNAME": "eth0",
            }  # fmt: skip
            try:
                report = call(bindir / "bridge", {**env, "CNI_COMMAND": "ADD"}, bridge, True)
                call(bindir / "bridge", {**env, "CNI_COMMAND": "DEL"}, bridge)
            finally:
                delete_netns(pod)
            for us, module in _IMPORT_LINE.findall(report):
                own.setdefault(module, []).append(int(us))
    return {module: statistics.median(us) for module, us in own.items()}


# One fresh interpreter creates 19 frozen classes of one to three fields (the shape of
# net/netfilter/model.py's nodes) one way; it prints the microseconds per class.
_CLASSES = """
import sys, time
kind, shapes = sys.argv[1], [("a", "b"), ("a",), ("a", "b", "c")]
if kind == "record":
    from pycni.record import record as make
    make = make(frozen=True)
elif kind == "dataclass":
    from dataclasses import dataclass
    make = dataclass(frozen=True)
start = time.perf_counter_ns()
for i in range(19):
    fields = shapes[i % 3]
    if kind == "plain":
        def init(self, *args, _fields=fields):
            for name, value in zip(_fields, args):
                object.__setattr__(self, name, value)
        type(f"C{i}", (), {"__slots__": fields, "__init__": init, "_fields": fields})
    else:
        ns = {"__annotations__": dict.fromkeys(fields, "str"), "__module__": "__main__"}
        make(type(f"C{i}", (), ns))
print((time.perf_counter_ns() - start) / 1000 / 19)
"""


def class_costs(tree: Path, rounds: int) -> dict[str, float]:
    """Microseconds to create one class: a record, a hand-written class, a dataclass (the
    import of their module not counted), medians of ``rounds`` interleaved fresh processes."""
    python = str(tree / ".venv/bin/python")
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for kind in ("record", "plain", "dataclass"):
            proc = subprocess.run(
                [python, "-c", _CLASSES, kind], capture_output=True, text=True, check=True
            )
            out.setdefault(kind, []).append(float(proc.stdout))
    return {kind: statistics.median(us) for kind, us in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--tree", action="append", required=True, help="label=path")
    parser.add_argument("--pods", type=int, default=60)
    parser.add_argument("--import-rounds", type=int, default=7)
    args = parser.parse_args()
    trees = {label: Path(path).resolve() for label, path in (t.split("=", 1) for t in args.tree)}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        work = Path(tmp)
        bindirs = {label: install(tree, work / f"bin-{label}") for label, tree in trees.items()}
        nodes: dict[str, str] = {}
        times: dict[tuple[str, str], list[float]] = {}
        try:
            for label in trees:
                nodes[label] = create_netns(f"{PREFIX}{label}")
            for i in range(args.pods + 1):
                for label, bindir in bindirs.items():
                    pod = f"{PREFIX}{label[:3]}{i}"
                    path = create_netns(pod)
                    env = {
                        **ENV_BASE, "CNI_CONTAINERID": pod, "CNI_NETNS": path,
                        "CNI_PATH": str(bindir), "CNI_ARGS": "",
                    }  # fmt: skip
                    try:
                        with NetNS.open(nodes[label]) as ns, ns.entered():
                            ipam = work / f"ipam-{label}"
                            add, add_cpu = chain(bindir, "ADD", env, ipam, False)
                            delete, del_cpu = chain(bindir, "DEL", env, ipam, False)
                    finally:
                        delete_netns(pod)
                    if i:
                        times.setdefault(("ADD wall", label), []).append(add)
                        times.setdefault(("DEL wall", label), []).append(delete)
                        times.setdefault(("ADD cpu", label), []).append(add_cpu)
                        times.setdefault(("DEL cpu", label), []).append(del_cpu)
            last = list(trees)[-1]
            costs = import_costs(bindirs[last], nodes[last], work, args.import_rounds)
        finally:
            for name in [f"{PREFIX}{label}" for label in trees]:
                delete_netns(name)
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}, {args.pods} pods per tree")
    for (verb, label), values in sorted(times.items()):
        q = statistics.quantiles(values, n=10)
        print(
            f"{verb} {label}: p50 {statistics.median(values):.1f} ms "
            f"(p10 {q[0]:.1f}, p90 {q[-1]:.1f})"
        )
    print(f"\nown import time per module of a bridge ADD ({last}), median us:")
    pycni = {m: us for m, us in costs.items() if m.startswith("pycni")}
    print(f"total {sum(costs.values()) / 1000:.1f} ms over {len(costs)} modules; "
          f"pycni's {len(pycni)} modules {sum(pycni.values()) / 1000:.1f} ms")  # fmt: skip
    for module, us in sorted(costs.items(), key=lambda kv: -kv[1]):
        print(f"{us:8.0f}  {module}")
    classes = class_costs(trees[last], args.import_rounds * 2)
    print("\nclass creation, us per class (median): " + ", ".join(
        f"{kind} {us:.1f}" for kind, us in classes.items()
    ))  # fmt: skip


if __name__ == "__main__":
    main()
