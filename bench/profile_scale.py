#!/usr/bin/env python3
"""Where an ADD's time goes at 10, 300, 1000 pods: per plugin, per step, and a cProfile.

Not a test. In a private node namespace, pods are attached by calling the plugins in this
process through skel (as the warm daemon does): loopback, bridge (+ host-local, ipMasq),
portmap with one mapping. At each checkpoint one more pod is ADDed and DELeted under cProfile
and the functions whose cumulative time grew the most since the first checkpoint are printed,
so a cost that grows with the pod count shows up by name.

    sudo .venv/bin/python bench/profile_scale.py --checkpoints 10,300,1000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

sys.path.insert(0, str(ROOT / "bench"))

from kernel_perf import Perf, growth_table, kernel_time_by_syscall, report  # noqa: E402

from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402
from pycni.skel import run as skel  # noqa: E402

PREFIX = f"pprof{os.getpid() % 10000}-"
STEPS = os.environ.get("PYCNI_STEP_TIMINGS") == "1"  # print each plugin's step timings


def confs(data_dir: Path, port: int) -> list[tuple[str, str, dict[str, Any]]]:
    base = {"cniVersion": "1.0.0", "name": "profnet"}
    bridge = {
        **base,
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": True,
        "ipam": {
            "type": "host-local",
            "dataDir": str(data_dir),
            "ranges": [[{"subnet": "10.99.0.0/16"}]],
        },
    }
    portmap = {
        **base,
        "type": "portmap",
        "capabilities": {"portMappings": True},
        "runtimeConfig": {"portMappings": [{"hostPort": port, "containerPort": 80}]},
    }
    lo = {**base, "name": "proflo", "type": "loopback"}
    return [("loopback", "lo", lo), ("bridge", "eth0", bridge), ("portmap", "eth0", portmap)]


class Node:
    def __init__(self, plugin_dir: Path, data_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.data_dir = data_dir
        self.counter = 0
        self.results: dict[str, dict[str, Any]] = {}

    def call(
        self, plugin: str, command: str, cid: str, ifname: str, conf: dict[str, Any], fd: int
    ) -> dict[str, Any] | None:
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": f"/run/netns/{PREFIX}{cid}",
            "CNI_IFNAME": ifname,
            "CNI_PATH": str(self.plugin_dir),
        }
        if STEPS:
            env["PYCNI_STEP_TIMINGS"] = "1"
        out = skel.run(plugin, env, json.dumps(conf).encode(), netns_fd=fd)
        if STEPS and out.stderr:
            sys.stderr.write(out.stderr.decode())
        if out.exit_code != 0:
            raise RuntimeError(f"{plugin} {command}: {out.stdout!r} {out.stderr!r}")
        return json.loads(out.stdout) if command == "ADD" else None

    def add(self, cid: str) -> dict[str, float]:
        create_netns(PREFIX + cid)
        times: dict[str, float] = {}
        port = 20000 + int(cid[1:])
        with NetNS.open(f"/run/netns/{PREFIX}{cid}") as pod:
            prev: dict[str, Any] | None = None
            for plugin, ifname, conf in confs(self.data_dir, port):
                if plugin == "portmap":
                    conf = {**conf, "prevResult": prev}
                t0 = time.perf_counter()
                result = self.call(plugin, "ADD", cid, ifname, conf, pod.fd)
                times[plugin] = (time.perf_counter() - t0) * 1000
                if plugin == "bridge":
                    prev = result
        assert prev is not None
        self.results[cid] = prev
        return times

    def delete(self, cid: str) -> dict[str, float]:
        times: dict[str, float] = {}
        prev = self.results.pop(cid)
        with NetNS.open(f"/run/netns/{PREFIX}{cid}") as pod:
            for plugin, ifname, conf in reversed(confs(self.data_dir, 20000 + int(cid[1:]))):
                t0 = time.perf_counter()
                self.call(plugin, "DEL", cid, ifname, {**conf, "prevResult": prev}, pod.fd)
                times[plugin] = (time.perf_counter() - t0) * 1000
        delete_netns(PREFIX + cid)
        return times


def top_functions(prof: cProfile.Profile) -> dict[str, float]:
    stats = pstats.Stats(prof)
    out: dict[str, float] = {}
    for (file, line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        out[f"{Path(file).name}:{line}:{name}"] = ct * 1000
    return out


def _perfs(out_dir: Path | None, level: int) -> tuple[Perf | None, Perf | None]:
    if out_dir is None:
        return None, None
    out_dir.mkdir(parents=True, exist_ok=True)
    return Perf(out_dir / f"pycni-add-{level}.data"), Perf(out_dir / f"pycni-del-{level}.data")


def _run(perf: Perf | None, work: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``work()``, recorded by ``perf`` when given."""
    if perf is None:
        return work()
    out: dict[str, float] = {}
    perf.run(lambda: out.update(work()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="10,300,1000")
    parser.add_argument("--probe", type=int, default=5, help="ADD+DEL probes per checkpoint")
    parser.add_argument(
        "--perf",
        type=Path,
        help="record the probes' ADDs and DELs with perf (kernel stacks) into this dir",
    )
    args = parser.parse_args()
    checkpoints = [int(x) for x in args.checkpoints.split(",")]
    work = Path(tempfile.mkdtemp(prefix="pprof-"))
    fast_install.install(work / "bin", form="inprocess")
    node_name = PREFIX + "node"
    create_netns(node_name)
    node = Node(work / "bin", work / "data")
    live: list[str] = []
    profiles: dict[int, dict[str, float]] = {}
    perf_tables: dict[str, dict[int, dict[str, float]]] = {}
    try:
        with NetNS.open(f"/run/netns/{node_name}") as ns, ns.entered():
            k = 0
            for level in checkpoints:
                while len(live) < level:
                    k += 1
                    cid = f"c{k}"
                    node.add(cid)
                    live.append(cid)
                adds: dict[str, list[float]] = {}
                dels: dict[str, list[float]] = {}
                prof = cProfile.Profile()
                perfs = _perfs(args.perf, level)
                for _ in range(args.probe):
                    k += 1
                    cid = f"c{k}"
                    prof.enable()
                    a = _run(perfs[0], lambda cid=cid: node.add(cid))  # type: ignore[misc]
                    d = _run(perfs[1], lambda cid=cid: node.delete(cid))  # type: ignore[misc]
                    prof.disable()
                for perf in perfs:
                    if perf is not None:
                        perf.stop()
                        report(perf.data, perf.data.with_suffix(".txt"))
                        table = kernel_time_by_syscall(perf.data, os.getpid(), args.probe)
                        name = perf.data.stem.rsplit("-", 1)[0]
                        perf_tables.setdefault(name, {})[level] = table
                    for name, v in a.items():
                        adds.setdefault(name, []).append(v)
                    for name, v in d.items():
                        dels.setdefault(name, []).append(v)
                profiles[level] = {n: v / args.probe for n, v in top_functions(prof).items()}
                cells = ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in adds.items())
                dcells = ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in dels.items())
                print(f"@{level} pods: ADD ms: {cells}; DEL ms: {dcells}", flush=True)
            first, last = profiles[checkpoints[0]], profiles[checkpoints[-1]]
            growth = sorted(((last.get(n, 0) - first.get(n, 0), n) for n in last), reverse=True)[
                :40
            ]
            print(f"\ncumulative ms per ADD+DEL, growth {checkpoints[0]} -> {checkpoints[-1]}:")
            for delta, name in growth:
                print(f"  {delta:+8.2f}  {first.get(name, 0):7.2f} -> {last[name]:7.2f}  {name}")
            for name, tables in perf_tables.items():
                print(f"\n{name}: kernel time of this process per call, by syscall > function")
                print(growth_table(tables))
            for cid in list(live):
                node.delete(cid)
                live.remove(cid)
    finally:
        for cid in live:
            delete_netns(PREFIX + cid)
        delete_netns(node_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
