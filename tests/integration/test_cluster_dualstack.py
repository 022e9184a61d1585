"""Dual-stack and IPv6-only clusters: `pycni cluster up --dual-stack` / `--ipv6-only`,
3 nodes x 2 pods, host-gw and vxlan (VXLAN over the IPv6 underlay for IPv6 pods).

Every pod gets an address of each family of the cluster from its node's subnets and a
default route per family; every pod reaches every other pod over each family (ping and
ping6) and the receiver sees the sender's pod address; traffic to the outside (the
underlay namespace) is masqueraded to the node's address of that family; a don't-fragment
IPv6 packet of exactly the computed MTU (VXLAN over IPv6: underlay - 70) reaches a pod on
another node and one byte more does not leave the pod.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pycni import playground
from pycni.cluster.subnet import read_subnet_env
from pycni.playground import cluster
from tests import harness
from tests.integration.cluster_helpers import (
    MARKS,
    PlaygroundCluster,
    echo_client,
    echo_server,
    pycni,
    serve_in,
    stop_all,
)

pytestmark = MARKS

PORT = 7778

SERVER = echo_server(PORT, dual_stack=True)

CLIENT = echo_client(PORT)

CASES = [("dual", "host-gw"), ("dual", "vxlan"), ("ipv6", "host-gw"), ("ipv6", "vxlan")]


Cluster = PlaygroundCluster


@pytest.fixture(scope="module", params=CASES, ids=[f"{f}-{b}" for f, b in CASES])
def up(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    family, backend = request.param
    root = tmp_path_factory.mktemp(f"cluster-{family}-{backend}") / "state"
    prefix = f"{harness.RUN_PREFIX}{family[:2]}{backend[:2]}-"
    c = Cluster(backend, root, prefix, family)
    flag = "--dual-stack" if family == "dual" else "--ipv6-only"
    proc = pycni(
        "cluster", "--state-dir", str(root), "up", flag, "--nodes", "3",
        "--pods-per-node", "2", "--backend", backend, "--prefix", prefix,
        "--ttl", "5", "--reconcile-interval", "1", timeout=180,
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield c
    finally:
        if not c.is_down:
            c.down()


def _families(c: Cluster) -> list[int]:
    return [4, 6] if c.family == "dual" else [6]


def test_pods_get_an_address_and_a_default_route_per_family(up: Cluster) -> None:
    state = up.state()
    for node in state.nodes:
        env = read_subnet_env(node.subnet_file)
        assert [n.version for n, _s in env.pairs] == _families(up)
        assert env.ipv6_subnet is not None and env.ipv6_subnet.prefixlen == 64
        assert env.ipv6_network == ipaddress.ip_network(cluster.DEFAULT_IPV6_NETWORK)
        # one MTU for pods: the smallest data path (VXLAN over IPv6 costs 70)
        assert env.mtu == (1430 if up.backend == "vxlan" else 1500)
    assert len(state.pods) == 6
    for pod in state.pods:
        node = state.node(pod.node)
        ns = harness.Namespace(pod.name)
        subnets = [ipaddress.ip_network(s) for s in node.subnets()]
        addresses = [ipaddress.ip_address(a) for a in (pod.address, pod.address6) if a]
        assert sorted({a.version for a in addresses}) == _families(up)
        for address in addresses:
            assert any(address in s for s in subnets), (pod.name, address, subnets)
        for version in _families(up):
            routes = ns.json("ip", f"-{version}", "-j", "route", "show", "default")
            assert isinstance(routes, list) and len(routes) == 1, (pod.name, routes)
        assert ns.links()["eth0"]["mtu"] == (1430 if up.backend == "vxlan" else 1500)


def test_every_pod_reaches_every_other_on_each_family(up: Cluster) -> None:
    proc = pycni("cluster", "--state-dir", str(up.root), "status", "--json", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert len(report["ping"]) == 6  # ping and ping6 to every address of every other pod
    assert all(all(row.values()) and len(row) == 5 for row in report["ping"].values())
    state = up.state()
    servers: list[subprocess.Popen[str]] = []
    try:
        for pod in state.pods:
            servers.append(serve_in(pod.name, SERVER))
        for src in state.pods:
            own = {4: src.address if up.family == "dual" else "", 6: src.address6}
            targets = [
                a for p in state.pods if p.name != src.name for a in (p.address, p.address6) if a
            ]
            targets = list(dict.fromkeys(targets))
            out = harness.Namespace(src.name).run(sys.executable, "-c", CLIENT, *targets).stdout
            seen = dict(line.split() for line in out.splitlines())
            expected = {t: own[ipaddress.ip_address(t).version] for t in targets}
            assert seen == expected, (src.name, out)
    finally:
        stop_all(servers)


def test_traffic_to_the_outside_is_masqueraded_per_family(up: Cluster) -> None:
    state = up.state()
    outside = {6: str(state.underlay_gateway6.ip)}
    if up.family == "dual":
        outside[4] = str(state.underlay_gateway.ip)
    server = serve_in(state.underlay_ns, SERVER)
    try:
        for node in state.nodes:
            pod = next(p for p in state.pods if p.node == node.name)
            out = (
                harness.Namespace(pod.name)
                .run(sys.executable, "-c", CLIENT, *outside.values())
                .stdout
            )
            seen = dict(line.split() for line in out.splitlines())
            node_address = {6: node.address6, 4: node.address}
            assert seen == {dst: node_address[v] for v, dst in outside.items()}, out
    finally:
        stop_all([server])
    tables = harness.Namespace(state.nodes[0].name).run("nft", "list", "tables").stdout
    assert "table ip6 pycni-cluster" in tables
    assert ("table ip pycni-cluster" in tables) == (up.family == "dual")


def _df_ping6(ns: harness.Namespace, address: str, packet: int) -> bool:
    """One don't-fragment ping6 whose IPv6 packet is ``packet`` bytes long (40 bytes of
    IPv6 header, 8 of ICMPv6)."""
    proc = ns.run(
        "ping", "-6", "-M", "do", "-s", str(packet - 48), "-c", "1", "-W", "3", address,
        check=False,
    )  # fmt: skip
    return proc.returncode == 0


def test_pod_mtu_is_exactly_what_crosses_the_ipv6_data_path(up: Cluster) -> None:
    """The MTU the agent computed from the underlay (1500 - 70 for VXLAN over IPv6, 1500
    for host-gw) is what the IPv6 data path carries: a don't-fragment IPv6 packet of
    exactly that size reaches a pod on another node, one byte more does not leave the pod."""
    state = up.state()
    src = next(p for p in state.pods if p.node == state.nodes[0].name)
    dst = next(p for p in state.pods if p.node == state.nodes[1].name)
    node = harness.Namespace(state.nodes[0].name)
    underlay = int(str(node.links()[cluster.NODE_IFNAME]["mtu"]))
    mtu = read_subnet_env(state.nodes[0].subnet_file).mtu
    if up.backend == "vxlan":
        assert mtu == underlay - 70 == 1430
        assert node.links()["pycni-v6.1"]["mtu"] == mtu
    else:
        assert mtu == underlay == 1500
    assert harness.Namespace(src.name).links()["eth0"]["mtu"] == mtu
    assert _df_ping6(harness.Namespace(src.name), dst.address6, mtu), (src.name, dst.address6)
    assert not _df_ping6(harness.Namespace(src.name), dst.address6, mtu + 1)


def test_down_leaves_nothing(up: Cluster) -> None:
    names = list(up.state().created)
    proc = up.down()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [n for n in names if os.path.exists(playground.netns_path(n))] == []
    assert not up.root.exists()
