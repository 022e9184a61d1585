#!/usr/bin/env python3
"""How fast a `pycni cluster` converges: 50 host-gw nodes, then one more joining.

Not a test. Builds the same cluster `pycni cluster up --nodes 50 --pods-per-node 0
--backend host-gw` builds (one underlay namespace with etcd, a namespace and an agent
process per node) under a private prefix and state directory, and measures:

- from starting the 50 agents until every one has leased a subnet, and until every node
  routes to every other node (50 x 49 routes);
- from starting one more node's agent until it has leased, until the 50 others route to
  it, and until it routes to all 50;
- the agents' memory (RSS) and CPU time.

Prints a table and writes it to docs/benchmarks-cluster.md (bench/run.py owns
docs/benchmarks.md). The cluster is always removed at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.playground import cluster  # noqa: E402

PREFIX = f"pcbench{os.getpid() % 10000}-"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``predicate`` holds (polled every 50 ms)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.05)
    raise SystemExit(f"gave up after {timeout:.0f}s waiting for {what}")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _routes_to(nodes: list[cluster.NodeState], subnet: str) -> bool:
    return all(subnet in cluster.node_routes(n) for n in nodes)


def _full_mesh(state: cluster.ClusterState) -> bool:
    subnets = {n.name: n.subnet() for n in state.nodes}
    for node in state.nodes:
        have = cluster.node_routes(node)
        if any(s not in have for other, s in subnets.items() if other != node.name):
            return False
    return True


def measure(count: int, root: str, timeout: float) -> list[tuple[str, str]]:
    state = cluster.new_state(root, PREFIX)
    opts = cluster.UpOptions(nodes=count, pods_per_node=0, backend="host-gw")
    state.backend, state.network, state.ttl = opts.backend, opts.network, opts.ttl
    state.reconcile_interval = opts.reconcile_interval
    os.makedirs(root, mode=0o700, exist_ok=True)
    state.save()
    rows: list[tuple[str, str]] = []
    try:
        started = time.monotonic()
        cluster.build_underlay(state, count)
        rows.append(
            (f"underlay + {count} node namespaces built (s)", f"{time.monotonic() - started:.2f}")
        )
        started = time.monotonic()
        cluster.start_etcd(state)
        rows.append(("etcd started and healthy (s)", f"{time.monotonic() - started:.2f}"))

        started = time.monotonic()
        for node in state.nodes:
            cluster.start_agent(state, node)
        leased = _wait(lambda: all(n.subnet() for n in state.nodes), timeout, "the leases")
        _wait(lambda: _full_mesh(state), timeout, "the full mesh")
        total = time.monotonic() - started
        rows.append((f"{count} agents started -> all leased (s)", f"{leased:.2f}"))
        rows.append(
            (f"{count} agents started -> every node routes to every other (s)", f"{total:.2f}")
        )
        pids = [n.agent_pid for n in state.nodes if n.agent_pid]
        rows.append(
            ("agent RSS, mean per agent (MiB)", f"{sum(map(_rss_mib, pids)) / len(pids):.1f}")
        )
        cpu = sum(map(_cpu_seconds, pids))
        rows.append((f"agent CPU time until converged, all {count} (s)", f"{cpu:.1f}"))

        others = list(state.nodes)
        newcomer = cluster.add_node(state)
        started = time.monotonic()
        cluster.start_agent(state, newcomer)
        joined = _wait(lambda: bool(newcomer.subnet()), timeout, "the newcomer's lease")
        subnet = newcomer.subnet()
        seen = _wait(lambda: _routes_to(others, subnet), timeout, "routes to the newcomer")
        seen += joined
        reaches = _wait(
            lambda: len(cluster.node_routes(newcomer)) == count, timeout, "the newcomer's routes"
        )
        reaches += seen
        rows.append((f"node {count + 1} started -> leased (s)", f"{joined:.2f}"))
        rows.append(
            (f"node {count + 1} started -> all {count} others route to it (s)", f"{seen:.2f}")
        )
        rows.append((f"node {count + 1} started -> it routes to all {count} (s)", f"{reaches:.2f}"))
        cpu_after = sum(map(_cpu_seconds, pids))
        rows.append((f"CPU of the {count} agents for one join (s)", f"{cpu_after - cpu:.2f}"))
    finally:
        started = time.monotonic()
        problems = cluster.down(state)
        print(f"cluster removed in {time.monotonic() - started:.1f}s", file=sys.stderr)
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
    return rows


def render(rows: list[tuple[str, str]], count: int) -> str:
    machine = (
        f"{os.cpu_count()} CPUs, kernel {platform.release()}, Python {platform.python_version()}"
    )
    lines = [
        "# Cluster benchmark",
        "",
        f"Measured by `bench/bench_cluster.py --nodes {count}` on {time.strftime('%Y-%m-%d')}.",
        f"Machine: {machine}; load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"A `pycni cluster` of {count} host-gw nodes (0 pods), each node a namespace on one "
        "underlay bridge with its own `pycni agent` process, one etcd; then one node more.",
        "Times are wall-clock from starting the agents (Python start-up included), polled "
        "every 50 ms.",
        "",
        "| measurement | value |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in rows],
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase, seconds")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-cluster.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="pycni-bench-cluster-") as tmp:
        rows = measure(args.nodes, os.path.join(tmp, "state"), args.timeout)
    text = render(rows, args.nodes)
    sys.stdout.write(text)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
