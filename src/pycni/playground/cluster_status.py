"""What `pycni cluster status` shows: nodes, leases, routes, and a cross-node ping matrix."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

from pycni.cluster.etcd import EtcdError
from pycni.cluster.lease import LeaseStore
from pycni.playground import netns_path
from pycni.playground.cluster import ETCD_PREFIX, ClusterState, agent_running, node_routes
from pycni.record import field, record


@record
class Report:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    leases: list[dict[str, Any]] = field(default_factory=list)
    routes: dict[str, dict[str, str]] = field(default_factory=dict)
    ping: dict[str, dict[str, bool]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "pods": self.pods,
            "leases": self.leases,
            "routes": self.routes,
            "ping": self.ping,
            "errors": self.errors,
        }

    @property
    def all_pings_ok(self) -> bool:
        return all(ok for row in self.ping.values() for ok in row.values())


def ping(source_ns: str, address: str, timeout: int = 2) -> bool:
    proc = subprocess.run(
        ["nsenter", f"--net={netns_path(source_ns)}", "--", "ping",
         "-6" if ":" in address else "-4", "-c", "1", "-W", str(timeout), address],
        capture_output=True,
        check=False,
        timeout=timeout + 10,
    )  # fmt: skip
    return proc.returncode == 0


def ping_matrix(state: ClusterState) -> dict[str, dict[str, bool]]:
    """Every pod pings every other pod (in parallel); rows are sources."""
    pods = [p for p in state.pods if p.address]
    pairs = [
        (s, d, address)
        for s in pods
        for d in pods
        if s.name != d.name
        for address in dict.fromkeys(a for a in (d.address, d.address6) if a)
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda sda: ping(sda[0].name, sda[2]), pairs))
    matrix: dict[str, dict[str, bool]] = {p.name: {} for p in pods}
    for (src, dst, _address), ok in zip(pairs, results, strict=True):
        matrix[src.name][dst.name] = matrix[src.name].get(dst.name, True) and ok
    return matrix


def collect(state: ClusterState, *, with_ping: bool = True) -> Report:
    report = Report()
    for node in state.nodes:
        report.nodes.append(
            {
                "namespace": node.name,
                "address": node.address,
                "address6": node.address6,
                "subnet": node.subnet(),
                "subnets": node.subnets(),
                "agent_pid": node.agent_pid,
                "agent_running": agent_running(node),
            }
        )
        try:
            report.routes[node.name] = node_routes(node)
        except Exception as exc:
            report.errors.append(f"routes of {node.name}: {exc}")
    report.pods = [
        {"namespace": p.name, "node": p.node, "address": p.address, "address6": p.address6}
        for p in state.pods
    ]
    try:
        leases, _rev = LeaseStore(state.etcd(), ETCD_PREFIX).list()
        report.leases = [
            {
                "subnet": str(subnet),
                "public_ip": str(info.public_ip),
                "backend": info.backend_type,
                "backend_data": info.backend_data,
                "lease": f"{kv.lease:x}",
            }
            for subnet, (info, kv) in sorted(
                leases.items(), key=lambda item: (item[0].version, item[0])
            )
        ]
    except EtcdError as exc:
        report.errors.append(f"leases: {exc}")
    if with_ping:
        report.ping = ping_matrix(state)
    return report


def render(report: Report, out: TextIO) -> None:
    out.write("Nodes\n")
    for n in report.nodes:
        agent = f"agent {n['agent_pid']}" if n["agent_running"] else "agent NOT RUNNING"
        subnets = " ".join(n["subnets"]) or "-"
        out.write(f"  {n['namespace']:<28} {n['address']:<15} {subnets:<40} {agent}\n")
    out.write("\nLeases in etcd\n")
    for lease in report.leases:
        mac = lease["backend_data"].get("VtepMAC", "")
        out.write(
            f"  {lease['subnet']:<18} -> {lease['public_ip']:<15} {lease['backend']:<8}"
            f" {mac:<17} lease {lease['lease']}\n"
        )
    out.write("\nRoutes (programmed by the agents)\n")
    for node, routes in report.routes.items():
        shown = ", ".join(f"{d} via {g}" for d, g in sorted(routes.items())) or "none"
        out.write(f"  {node}: {shown}\n")
    if report.pods:
        out.write("\nPods\n")
        for p in report.pods:
            shown = " ".join(a for a in dict.fromkeys((p["address"], p["address6"])) if a) or "-"
            out.write(f"  {p['namespace']:<32} {shown:<40} on {p['node']}\n")
    if report.ping:
        out.write("\nPing matrix (rows ping columns)\n")
        names = list(report.ping)
        short = {n: n.rsplit("-", 2)[-2] + "-" + n.rsplit("-", 1)[-1] for n in names}
        width = max([len(s) for s in short.values()] + [6]) + 2
        out.write(" " * width + "".join(short[n].ljust(width) for n in names) + "\n")
        for src in names:
            cells = [
                ("-" if src == dst else ("ok" if report.ping[src].get(dst) else "FAIL")).ljust(
                    width
                )
                for dst in names
            ]
            out.write(short[src].ljust(width) + "".join(cells).rstrip() + "\n")
    for err in report.errors:
        out.write(f"\nwarning: {err}\n")
