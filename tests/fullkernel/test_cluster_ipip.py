"""The agent's ipip backend on a kernel with ipip (the full-kernel lane).

A 3-node cluster, one pod per node: every pod reaches every other; the underlay carries
their traffic as IP-in-IP (protocol 4) between the nodes' addresses, the pods' addresses
visible only in the inner header (no encryption), never as an outer address; routes go
through the agent's `pycni.ipip` device via each node's address; pods get the underlay's
MTU less 20; a node that leaves loses its route on every other node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from pycni.cluster.subnet import read_subnet_env
from pycni.playground import cluster
from tests import harness
from tests.fullkernel import cluster_lane as lane
from tests.integration.cluster_helpers import wait_for

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterState]:
    s = lane.up(tmp_path_factory.mktemp("ipip") / "state", "ipip")
    try:
        yield s
    finally:
        lane.down(s)


def test_pods_reach_each_other_over_ip_in_ip(state: cluster.ClusterState) -> None:
    results, frames = lane.ping_all_captured(state)
    assert results and all(results.values()), (results, lane.logs(state))
    pods, nodes = lane.pod_addresses(state), lane.node_addresses(state)
    inner_seen = 0
    for frame in lane.ip_frames(frames):
        assert frame.src not in pods and frame.dst not in pods, frame
        if frame.src in nodes and frame.dst in nodes:
            assert frame.proto == 4, frame  # IP in IP, nothing else between the nodes
            inner_src = ipaddress.IPv4Address(frame.payload[12:16])
            inner_dst = ipaddress.IPv4Address(frame.payload[16:20])
            assert inner_src in pods and inner_dst in pods, frame  # no encryption
            inner_seen += 1
    assert inner_seen >= 2 * len(results)  # every echo and its reply crossed encapsulated


def test_routes_device_and_mtu(state: cluster.ClusterState) -> None:
    for node in state.nodes:
        ns = harness.Namespace(node.name)
        link = ns.links()["pycni.ipip"]
        data = link["linkinfo"]["info_data"]  # type: ignore[index]
        assert data["local"] == node.address and data.get("remote", "any") == "any", data
        assert link["mtu"] == 1480
        assert read_subnet_env(node.subnet_file).mtu == 1480
        routes = cluster.node_routes(node)
        others = {n.subnet(): n.address for n in state.nodes if n is not node}
        assert routes == others
        text = ns.run("ip", "route", "show", "proto", "157").stdout
        assert text.count("dev pycni.ipip") == 2 and text.count("onlink") == 2, text


def test_a_node_that_leaves_loses_its_route(state: cluster.ClusterState) -> None:
    node1, node2, node3 = state.nodes
    subnet = node3.subnet()
    lane.leave(state, node3)
    wait_for(
        lambda: all(subnet not in cluster.node_routes(n) for n in (node1, node2)),
        60,
        "node3's route to go",
        lambda: lane.logs(state),
    )
    assert lane.reaches(state.pods[0].name, state.pods[1].address)
