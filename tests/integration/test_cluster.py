"""`pycni cluster up --nodes 3 --pods-per-node 2` for each backend, with a real etcd.

Checks traffic between every pair of pods (and that the receiver sees the sender's pod IP),
the data path each backend programs, leases that expire when an agent dies (routes go),
a restarted agent getting its subnet back, racing claims never sharing a subnet, routes
deleted by hand coming back, and `down` leaving nothing behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni import playground
from pycni.cluster import up as cluster
from pycni.cluster.lease import LeaseError, LeaseInfo, LeaseStore
from pycni.cluster.subnet import NetworkConfig
from tests import harness

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

PYCNI = str(Path(sys.executable).parent / "pycni")
TTL = 3
RECONCILE = 1.0
PORT = 7777

SERVER = f"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT}))
s.listen(64)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(peer[0].encode())
    c.close()
"""

CLIENT = f"""
import socket, sys
for dst in sys.argv[1:]:
    c = socket.create_connection((dst, {PORT}), timeout=5)
    print(dst, c.recv(100).decode(), flush=True)
    c.close()
"""


def _pycni(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYCNI, *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Cluster:
    def __init__(self, backend: str, root: Path, prefix: str) -> None:
        self.backend = backend
        self.root = root
        self.prefix = prefix
        self.is_down = False

    def state(self) -> cluster.ClusterState:
        return cluster.ClusterState.load(str(self.root))

    def ns(self, name: str) -> harness.Namespace:
        return harness.Namespace(name)

    def pids(self) -> list[int]:
        state = self.state()
        return [p for p in [state.etcd_pid, *(n.agent_pid for n in state.nodes)] if p]

    def down(self) -> subprocess.CompletedProcess[str]:
        self.is_down = True
        return _pycni("cluster", "--state-dir", str(self.root), "down")


@pytest.fixture(scope="module", params=["host-gw", "vxlan"])
def up(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    backend = request.param
    root = tmp_path_factory.mktemp(f"cluster-{backend}") / "state"
    prefix = f"{harness.RUN_PREFIX}{'hg' if backend == 'host-gw' else 'vx'}-"
    c = Cluster(backend, root, prefix)
    started = time.monotonic()
    proc = _pycni(
        "cluster", "--state-dir", str(root), "up", "--nodes", "3", "--pods-per-node", "2",
        "--backend", backend, "--prefix", prefix, "--ttl", str(TTL),
        "--reconcile-interval", str(RECONCILE),
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "leased" in proc.stdout and "cluster up" in proc.stdout  # progress was shown
        assert time.monotonic() - started < 30
        yield c
    finally:
        if not c.is_down:
            c.down()


def test_status_lists_nodes_and_pods_and_all_pings_pass(up: Cluster) -> None:
    proc = _pycni("cluster", "--state-dir", str(up.root), "status", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    nodes, pods = report["nodes"], report["pods"]
    assert [n["namespace"] for n in nodes] == [f"{up.prefix}node{i}" for i in (1, 2, 3)]
    subnets = {n["namespace"]: ipaddress.ip_network(n["subnet"]) for n in nodes}
    assert len(set(subnets.values())) == 3, subnets
    cluster_net = ipaddress.ip_network("10.244.0.0/16")
    assert all(s.subnet_of(cluster_net) and s.prefixlen == 24 for s in subnets.values())  # type: ignore[arg-type]
    assert all(n["agent_running"] for n in nodes)
    assert len(pods) == 6
    for pod in pods:
        assert ipaddress.ip_address(pod["address"]) in subnets[pod["node"]]
        assert up.ns(pod["namespace"]).exists()
    assert {lease["subnet"] for lease in report["leases"]} == {str(s) for s in subnets.values()}
    assert all(lease["backend"] == up.backend for lease in report["leases"])
    assert len(report["ping"]) == 6
    assert all(all(row.values()) and len(row) == 5 for row in report["ping"].values())
    text = _pycni("cluster", "--state-dir", str(up.root), "status", "--no-ping")
    assert "Leases in etcd" in text.stdout and "Routes" in text.stdout


def test_receiver_sees_the_senders_pod_ip(up: Cluster) -> None:
    """TCP between every pair of pods; the server echoes the peer address it saw (no NAT)."""
    state = up.state()
    servers = []
    try:
        for pod in state.pods:
            proc = subprocess.Popen(
                ["nsenter", f"--net={cluster.netns_path(pod.name)}", "--",
                 sys.executable, "-c", SERVER],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            servers.append(proc)
        for proc in servers:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for src in state.pods:
            others = [p.address for p in state.pods if p.name != src.name]
            out = up.ns(src.name).run(sys.executable, "-c", CLIENT, *others).stdout
            seen = dict(line.split() for line in out.splitlines())
            assert seen == {dst: src.address for dst in others}, (src.name, out)
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()


def test_data_path_of_the_backend(up: Cluster) -> None:
    state = up.state()
    node1 = state.nodes[0]
    others = {n.subnet(): n for n in state.nodes[1:]}
    routes = cluster.node_routes(node1)
    if up.backend == "host-gw":
        assert routes == {s: n.address for s, n in others.items()}
        assert "pycni.1" not in up.ns(node1.name).links()
        assert up.ns(state.pods[0].name).links()["eth0"]["mtu"] == 1500
        return
    assert routes == {s: s.split("/")[0] for s in others}
    links = up.ns(node1.name).links()
    assert links["pycni.1"]["mtu"] == int(str(links["eth0"]["mtu"])) - 50 == 1450
    assert up.ns(state.pods[0].name).links()["eth0"]["mtu"] == 1450
    leases, _ = LeaseStore(state.etcd(), cluster.ETCD_PREFIX).list()
    macs = {str(s): info.backend_data["VtepMAC"] for s, (info, _kv) in leases.items()}
    neigh = up.ns(node1.name).json("ip", "-j", "neigh", "show", "dev", "pycni.1")
    assert isinstance(neigh, list)
    assert {(n["dst"], n["lladdr"]) for n in neigh} == {(s.split("/")[0], macs[s]) for s in others}
    fdb = up.ns(node1.name).json("bridge", "-j", "fdb", "show", "dev", "pycni.1")
    assert isinstance(fdb, list)
    assert {(e["mac"], e["dst"]) for e in fdb if "dst" in e} == {
        (macs[s], n.address) for s, n in others.items()
    }


def test_route_deleted_by_hand_comes_back(up: Cluster) -> None:
    state = up.state()
    node1, node2 = state.nodes[0], state.nodes[1]
    target = node2.subnet()
    up.ns(node1.name).run("ip", "route", "del", target)
    assert target not in cluster.node_routes(node1)
    if up.backend == "vxlan":
        up.ns(node1.name).run("ip", "neigh", "del", target.split("/")[0], "dev", "pycni.1")
    _wait(lambda: target in cluster.node_routes(node1), RECONCILE + 3, "the route to come back")
    pod_src = next(p for p in state.pods if p.node == node1.name)
    pod_dst = next(p for p in state.pods if p.node == node2.name)
    assert up.ns(pod_src.name).ping(pod_dst.address)


def test_dead_node_loses_its_routes_and_gets_its_subnet_back(up: Cluster) -> None:
    state = up.state()
    node1, node3 = state.nodes[0], state.nodes[2]
    subnet3 = node3.subnet()
    store = LeaseStore(state.etcd(), cluster.ETCD_PREFIX)
    cluster.stop_agent(state, node3, hard=True)  # a crash: nothing is cleaned up
    started = time.monotonic()
    _wait(
        lambda: (
            subnet3 not in cluster.node_routes(node1)
            and subnet3 not in cluster.node_routes(state.nodes[1])
        ),
        TTL + RECONCILE + 5,
        "the other nodes to drop the dead node's routes",
    )
    assert time.monotonic() - started >= TTL - 1.5  # removed because the lease expired
    assert subnet3 not in {str(s) for s in store.list()[0]}
    if up.backend == "vxlan":
        neigh = up.ns(node1.name).run("ip", "neigh", "show", "dev", "pycni.1").stdout
        assert subnet3.split("/")[0] not in neigh
    cluster.start_agent(state, node3)
    _wait(lambda: subnet3 in {str(s) for s in store.list()[0]}, 15, "the restarted lease")
    leases = store.list()[0]
    assert str(leases[ipaddress.IPv4Network(subnet3)][0].public_ip) == node3.address
    assert node3.subnet() == subnet3
    cluster.wait_converged(state, timeout=10)
    src = next(p for p in state.pods if p.node == node1.name)
    dst = next(p for p in state.pods if p.node == node3.name)
    assert up.ns(src.name).ping(dst.address)


def test_racing_claims_never_share_a_subnet(up: Cluster) -> None:
    """Agents starting at the same moment: each claim is an etcd compare-create, so in a
    network with room for exactly three subnets, three of five racers win distinct ones."""
    state = up.state()
    store = LeaseStore(state.etcd(), f"/race-{up.backend}-{os.getpid()}")
    network = NetworkConfig.parse("10.250.0.0/26", 28)  # 4 /28s, the first never leased
    barrier = threading.Barrier(5)
    won: dict[int, str] = {}
    lost: list[int] = []

    def claim(i: int) -> None:
        info = LeaseInfo(ipaddress.IPv4Address(f"10.99.0.{100 + i}"), "host-gw")
        barrier.wait()
        try:
            lease = store.acquire(network, info, 30, rng=random.Random(0))
            won[i] = str(lease.subnet)
        except LeaseError:
            lost.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(won.values()) == ["10.250.0.16/28", "10.250.0.32/28", "10.250.0.48/28"]
    assert len(lost) == 2
    state.etcd().delete_prefix(store.prefix)


def test_down_leaves_nothing(up: Cluster) -> None:
    pids = up.pids()
    names = [n for n in up.state().created]
    proc = up.down()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cluster removed" in proc.stdout
    assert [n for n in names if os.path.exists(cluster.netns_path(n))] == []
    assert [n for n in harness.leftover_namespaces() if n.startswith(up.prefix)] == []
    assert [p for p in pids if os.path.exists(f"/proc/{p}") and playground.alive(p)] == []
    assert not up.root.exists()
    again = _pycni("cluster", "--state-dir", str(up.root), "down")
    assert again.returncode == 0 and "nothing to remove" in again.stdout
