"""`pycni cluster up --nodes 3 --pods-per-node 2` for each backend, with a real etcd.

Checks traffic between every pair of pods (and that the receiver sees the sender's pod IP),
pod traffic leaving the cluster network masqueraded to the node's address, the data path
each backend programs and what `pycni inspect` shows of it, leases that expire when an
agent dies (routes go), a restarted agent getting its subnet back with its pods still
reachable both ways, racing claims never sharing a subnet (in-process, and 20 real agents
started at once), etcd crashing and coming back without disturbing the data path, routes
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni import playground
from pycni.cluster.lease import LeaseError, LeaseInfo, LeaseStore
from pycni.cluster.subnet import NetworkConfig, read_subnet_env
from pycni.playground import cluster
from tests import harness
from tests.integration.cluster_helpers import (
    MARKS,
    PYCNI,
    PlaygroundCluster,
    echo_client,
    echo_server,
    pycni,
    serve_in,
    stop_all,
    wait_for,
)

pytestmark = MARKS

TTL = 3
RECONCILE = 1.0
PORT = 7777

SERVER = echo_server(PORT)

CLIENT = echo_client(PORT)


def _agent_logs(state: cluster.ClusterState) -> str:
    return "\n".join(f"--- {n.name}\n{Path(n.agent_log).read_text()}" for n in state.nodes)


class Cluster(PlaygroundCluster):
    def ns(self, name: str) -> harness.Namespace:
        return harness.Namespace(name)

    def pids(self) -> list[int]:
        state = self.state()
        return [p for p in [state.etcd_pid, *(n.agent_pid for n in state.nodes)] if p]


@pytest.fixture(scope="module", params=["host-gw", "vxlan"])
def up(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    backend = request.param
    root = tmp_path_factory.mktemp(f"cluster-{backend}") / "state"
    prefix = f"{harness.RUN_PREFIX}{'hg' if backend == 'host-gw' else 'vx'}-"
    c = Cluster(backend, root, prefix)
    started = time.monotonic()
    proc = pycni(
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
    proc = pycni("cluster", "--state-dir", str(up.root), "status", "--json")
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
    text = pycni("cluster", "--state-dir", str(up.root), "status", "--no-ping")
    assert "Leases in etcd" in text.stdout and "Routes" in text.stdout


def test_receiver_sees_the_senders_pod_ip(up: Cluster) -> None:
    """TCP between every pair of pods; the server echoes the peer address it saw (no NAT)."""
    state = up.state()
    servers: list[subprocess.Popen[str]] = []
    try:
        for pod in state.pods:
            servers.append(serve_in(pod.name, SERVER))
        for src in state.pods:
            others = [p.address for p in state.pods if p.name != src.name]
            out = up.ns(src.name).run(sys.executable, "-c", CLIENT, *others).stdout
            seen = dict(line.split() for line in out.splitlines())
            assert seen == {dst: src.address for dst in others}, (src.name, out)
    finally:
        stop_all(servers)


def test_traffic_leaving_the_cluster_network_comes_from_the_node(up: Cluster) -> None:
    """A pod talking to the underlay gateway (outside 10.244.0.0/16) is masqueraded to its
    node's underlay address; the outside has no route to pod subnets, so without the
    masquerade no answer could come back at all."""
    state = up.state()
    outside = str(state.underlay_gateway.ip)
    server = serve_in(state.underlay_ns, SERVER)
    try:
        for node in state.nodes:
            pod = next(p for p in state.pods if p.node == node.name)
            out = up.ns(pod.name).run(sys.executable, "-c", CLIENT, outside).stdout
            assert out.split() == [outside, node.address], (pod.name, out)
    finally:
        stop_all([server])
    rules = up.ns(state.nodes[0].name).run("nft", "list", "table", "ip", "pycni-cluster").stdout
    assert f"ip saddr {state.network} ip daddr {state.network} return" in rules


def test_inspect_shows_the_agents_lease_routes_and_device(up: Cluster) -> None:
    state = up.state()
    node1 = state.nodes[0]
    others = {n.subnet(): n for n in state.nodes[1:]}
    paths = [
        "--netconf-dir", os.path.dirname(node1.conflist), "--cache-dir", node1.cache_dir,
        "--data-dir", os.path.join(node1.dir, "ipam"),
    ]  # fmt: skip
    report = json.loads(up.ns(node1.name).run(PYCNI, "inspect", "--json", *paths).stdout)
    agent = report["cluster"]
    assert agent is not None and agent["masquerade_table"] is True
    [lease] = agent["leases"]
    assert lease["subnet_file"] == node1.subnet_file and lease["error"] is None
    assert (lease["network"], lease["subnet"]) == (state.network, node1.subnet())
    assert lease["mtu"] == (1500 if up.backend == "host-gw" else 1450) and lease["ipmasq"] is True
    routes = {r["dst"]: r for r in agent["routes"]}
    assert routes.keys() == others.keys()
    if up.backend == "host-gw":
        assert {d: (r["gateway"], r["dev"]) for d, r in routes.items()} == {
            s: (n.address, "eth0") for s, n in others.items()
        }
        assert agent["vxlan_devices"] == []
    else:
        assert all(r["dev"] == "pycni.1" and r["onlink"] for r in routes.values())
        [dev] = agent["vxlan_devices"]
        assert (dev["name"], dev["vni"], dev["local"], dev["port"]) == (
            "pycni.1",
            1,
            node1.address,
            8472,
        )
        assert dev["addresses"] == [node1.subnet().replace("/24", "/32")]
        assert sorted(dev["peers"].values()) == sorted(n.address for n in others.values())
    assert report["leaks"] == []
    text = up.ns(node1.name).run(PYCNI, "inspect", *paths).stdout
    assert "Cluster agent (masquerade table present)" in text
    assert node1.subnet() in text and all(s in text for s in others)


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
    assert read_subnet_env(node1.subnet_file).mtu == 1450
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


def _df_ping(ns: harness.Namespace, address: str, packet: int) -> bool:
    """One don't-fragment ping whose IPv4 packet is ``packet`` bytes long."""
    proc = ns.run(
        "ping", "-4", "-M", "do", "-s", str(packet - 28), "-c", "1", "-W", "3", address,
        check=False,
    )  # fmt: skip
    return proc.returncode == 0


def test_pod_mtu_is_exactly_what_crosses_the_overlay(up: Cluster) -> None:
    """The MTU the agent computed (underlay 1500 - 50 for VXLAN over IPv4, 1500 for host-gw)
    is what pods get: a don't-fragment packet of exactly that size reaches a pod on
    another node, one byte more does not."""
    state = up.state()
    src = next(p for p in state.pods if p.node == state.nodes[0].name)
    dst = next(p for p in state.pods if p.node == state.nodes[1].name)
    mtu = read_subnet_env(state.nodes[0].subnet_file).mtu
    assert mtu == (1450 if up.backend == "vxlan" else 1500)
    assert _df_ping(up.ns(src.name), dst.address, mtu)
    assert not _df_ping(up.ns(src.name), dst.address, mtu + 1)


def test_route_deleted_by_hand_comes_back(up: Cluster) -> None:
    state = up.state()
    node1, node2 = state.nodes[0], state.nodes[1]
    target = node2.subnet()
    # (run checks ip's status: the route was there and is gone; no look afterwards, the
    # agent's next full pass may already have put it back)
    up.ns(node1.name).run("ip", "route", "del", target)
    if up.backend == "vxlan":
        up.ns(node1.name).run("ip", "neigh", "del", target.split("/")[0], "dev", "pycni.1")
    # polled: the timeout only bounds a loaded machine's worst case (a pass every RECONCILE s)
    wait_for(lambda: target in cluster.node_routes(node1), RECONCILE + 20, "the route to come back")
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
    wait_for(
        lambda: (
            subnet3 not in cluster.node_routes(node1)
            and subnet3 not in cluster.node_routes(state.nodes[1])
        ),
        TTL + RECONCILE + 20,
        "the other nodes to drop the dead node's routes",
    )
    gone_after = time.monotonic() - started
    assert gone_after >= TTL - 1.5  # removed because the lease expired
    # ... and as soon as it did: the lease's DELETE event is applied at once (etcd expires
    # leases on a 0.5 s tick; the rest is margin for a loaded machine)
    assert gone_after <= TTL + 2.5, gone_after
    assert subnet3 not in {str(s) for s in store.list()[0]}
    if up.backend == "vxlan":
        neigh = up.ns(node1.name).run("ip", "neigh", "show", "dev", "pycni.1").stdout
        assert subnet3.split("/")[0] not in neigh
        fdb = up.ns(node1.name).run("bridge", "fdb", "show", "dev", "pycni.1").stdout
        assert f"dst {node3.address} " not in fdb, fdb
    cluster.start_agent(state, node3)
    wait_for(lambda: subnet3 in {str(s) for s in store.list()[0]}, 30, "the restarted lease")
    leases = store.list()[0]
    assert str(leases[ipaddress.IPv4Network(subnet3)][0].public_ip) == node3.address
    assert node3.subnet() == subnet3
    cluster.wait_converged(state, timeout=30)
    # its pods kept their addresses and work both ways, with every other node
    for pod in (p for p in state.pods if p.node == node3.name):
        assert (
            up.ns(pod.name)
            .run("ip", "-4", "-br", "addr", "show", "eth0")
            .stdout.split()[2]
            .startswith(pod.address + "/")
        )
        for other in (p for p in state.pods if p.node != node3.name):
            assert up.ns(pod.name).ping(other.address), (pod.name, other.name)
            assert up.ns(other.name).ping(pod.address), (other.name, pod.name)


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


def test_a_departed_nodes_subnet_is_reused_only_after_its_lease_expired(up: Cluster) -> None:
    """A network with one leasable subnet: while the departed node's lease lives a new
    node gets none; once the TTL ran out the new node gets that subnet."""
    if up.backend != "host-gw":
        pytest.skip("backend-independent: run once")
    state = up.state()
    store = LeaseStore(state.etcd(), f"/reuse-{os.getpid()}")
    network = NetworkConfig.parse("10.251.0.0/27", 28)  # 10.251.0.16/28 only
    gone = store.acquire(network, LeaseInfo(ipaddress.IPv4Address("10.99.0.201"), "host-gw"), 3)
    granted = time.monotonic()
    newcomer = LeaseInfo(ipaddress.IPv4Address("10.99.0.202"), "host-gw")
    got = None
    try:
        with pytest.raises(LeaseError, match="no free"):
            store.acquire(network, newcomer, 30)
        deadline = granted + 15
        while got is None and time.monotonic() < deadline:
            try:
                got = store.acquire(network, newcomer, 30)
            except LeaseError:
                time.sleep(0.2)
        assert got is not None and got.subnet == gone.subnet
        assert time.monotonic() - granted >= 3 - 0.5  # not before the TTL ran out
    finally:
        state.etcd().delete_prefix(store.prefix)


def _agent_argv(namespace: str, endpoint: str, prefix: str, backend: str, file: str) -> list[str]:
    return [
        "nsenter", f"--net={playground.netns_path(namespace)}", "--",
        sys.executable, "-m", cluster.AGENT_MARKER,
        "--etcd-endpoints", endpoint, "--etcd-prefix", prefix,
        "--network", "10.245.0.0/16", "--subnet-len", "21",
        "--backend", backend, "--iface", "eth0", "--subnet-file", file,
        "--ttl", "30", "--reconcile-interval", "5", "--no-ipmasq",
    ]  # fmt: skip


def test_twenty_agents_starting_together_get_twenty_distinct_subnets(
    up: Cluster, tmp_path: Path
) -> None:
    """20 real agent processes in 20 small node namespaces on the underlay, started in one
    burst against the same etcd, in a network of 31 subnets (so random picks collide)."""
    state = up.state()
    prefix = f"/twenty-{up.backend}-{os.getpid()}"
    names = [f"{up.prefix}r{i}" for i in range(1, 21)]
    addresses = [f"10.99.0.{100 + i}" for i in range(1, 21)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        batch = ""
        for i, name in enumerate(names, 1):
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
            batch += f"link add r{i} type veth peer name eth0 netns {name}\n"
            batch += f"link set r{i} master br0 up\n"
        subprocess.run(
            ["ip", "-n", state.underlay_ns, "-batch", "-"], input=batch.encode(), check=True
        )
        for name, address in zip(names, addresses, strict=True):
            node_batch = f"addr add {address}/24 dev eth0\nlink set eth0 up\nlink set lo up\n"
            subprocess.run(["ip", "-n", name, "-batch", "-"], input=node_batch.encode(), check=True)
        files = [tmp_path / f"r{i}.env" for i in range(1, 21)]
        argvs = [
            _agent_argv(name, state.etcd_endpoint, prefix, up.backend, str(f))
            for name, f in zip(names, files, strict=True)
        ]
        logs = (tmp_path / "agents.log").open("wb")
        procs = [subprocess.Popen(a, stdout=logs, stderr=logs) for a in argvs]
        # generous: 20 agents start on a shared 2-core machine (speed is in bench/)
        wait_for(lambda: all(f.exists() for f in files), 60, "20 subnet files")
        assert [p.poll() for p in procs] == [None] * 20, (tmp_path / "agents.log").read_text()
        subnets = [str(read_subnet_env(str(f)).subnet) for f in files]
        assert len(set(subnets)) == 20, subnets
        leases, _ = LeaseStore(state.etcd(), prefix).list()
        assert {str(s): str(info.public_ip) for s, (info, _kv) in leases.items()} == dict(
            zip(subnets, addresses, strict=True)
        )
        first = harness.Namespace(names[0])
        wait_for(
            lambda: len(first.json("ip", "-j", "route", "show", "proto", "157")) == 19,  # type: ignore[arg-type]
            30,
            "the first agent's routes to the 19 others",
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        for name in names:
            harness.Namespace(name).delete()
        state.etcd().delete_prefix(prefix)


def test_etcd_crash_leaves_the_data_path_and_agents_reconnect(up: Cluster) -> None:
    state = up.state()
    node1 = state.nodes[0]
    routes = {n.name: cluster.node_routes(n) for n in state.nodes}
    subnets = {n.name: n.subnet() for n in state.nodes}
    pod1 = next(p for p in state.pods if p.node == node1.name)
    remote_pods = [p for p in state.pods if p.node != node1.name]
    cluster.stop_etcd(state, hard=True)
    try:
        time.sleep(TTL + RECONCILE)  # renewals and reconcile passes fail meanwhile
        assert {n.name: cluster.node_routes(n) for n in state.nodes} == routes
        assert all(cluster.agent_running(n) for n in state.nodes)
        assert all(up.ns(pod1.name).ping(p.address) for p in remote_pods)
    finally:
        cluster.start_etcd(state)  # same data dir: the leases are still there
    restarted = time.monotonic()
    # a node that joins now (a lease written by hand) is seen by every agent: watch and
    # list reconnected
    ghost = ipaddress.IPv4Network("10.244.250.0/24")
    data = {"VNI": 1, "VtepMAC": "02:00:00:00:02:50"} if up.backend == "vxlan" else {}
    info = LeaseInfo(ipaddress.IPv4Address("10.99.0.250"), up.backend, data)
    store = LeaseStore(state.etcd(), cluster.ETCD_PREFIX)
    state.etcd().put(store.key(ghost), info.to_json())
    try:
        wait_for(
            lambda: all(str(ghost) in cluster.node_routes(n) for n in state.nodes),
            30,
            "every node to route to the node that joined after the restart",
            lambda: _agent_logs(state),
        )
    finally:
        state.etcd().delete(store.key(ghost))
    wait_for(
        lambda: all(str(ghost) not in cluster.node_routes(n) for n in state.nodes),
        30,
        "the routes to the removed node to go",
    )
    # leases are renewed again: past a TTL after the restart every node still holds its
    # subnet, and nothing moved
    time.sleep(max(TTL + 1 - (time.monotonic() - restarted), 0))
    live = {str(s): str(i.public_ip) for s, (i, _kv) in store.list()[0].items()}
    assert live == {subnets[n.name]: n.address for n in state.nodes}
    assert {n.name: n.subnet() for n in state.nodes} == subnets
    assert {n.name: cluster.node_routes(n) for n in state.nodes} == routes
    assert all(up.ns(pod1.name).ping(p.address) for p in remote_pods)


def test_down_leaves_nothing(up: Cluster) -> None:
    pids = up.pids()
    names = [n for n in up.state().created]
    proc = up.down()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cluster removed" in proc.stdout
    assert [n for n in names if os.path.exists(playground.netns_path(n))] == []
    assert [n for n in harness.leftover_namespaces() if n.startswith(up.prefix)] == []
    assert [p for p in pids if os.path.exists(f"/proc/{p}") and playground.alive(p)] == []
    assert not up.root.exists()
    again = pycni("cluster", "--state-dir", str(up.root), "down")
    assert again.returncode == 0 and "nothing to remove" in again.stdout
