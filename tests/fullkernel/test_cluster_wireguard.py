"""The agent's wireguard backend on a kernel with WireGuard (the full-kernel lane).

A dual-stack 3-node cluster, one pod per node, made by the playground as `pycni cluster up
--backend wireguard --dual-stack` makes it (one cluster: the lane runs under TCG): every
pod reaches every other on both families; a capture of every frame in the underlay
namespace finds only WireGuard UDP between the nodes and no pod address anywhere in it;
each node keeps its private key in a 0600 file and publishes the public key and port; the
peers carry endpoint, allowed-ips and keepalive; the pod MTU is the underlay's less 80 (the
IPv6 device's overhead; 60 for IPv4); a node that leaves is removed from its peers.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycni.cluster import wgkey, wgnl
from pycni.cluster.lease import LeaseStore
from pycni.cluster.subnet import read_subnet_env
from pycni.playground import cluster
from tests import harness
from tests.fullkernel import cluster_lane as lane
from tests.integration.cluster_helpers import wait_for

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

KEEPALIVE = 25  # what the playground gives its wireguard agents


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterState]:
    # dual-stack: both devices (IPv4 and IPv6 underlay) in one boot's one cluster
    s = lane.up(tmp_path_factory.mktemp("wg") / "state", "wireguard", "dual")
    try:
        yield s
    finally:
        lane.down(s)


def _device(node: cluster.NodeState, version: int) -> wgnl.Device:
    with harness.Namespace(node.name).entered(), wgnl.Client() as wg:
        index = socket.if_nametoindex("pycni-wg-v6" if version == 6 else "pycni-wg")
        return wg.device(index)


def test_pods_reach_each_other_and_the_underlay_sees_only_wireguard(
    state: cluster.ClusterState,
) -> None:
    results, frames = lane.ping_all_captured(state)
    assert results and all(results.values()), (results, lane.logs(state))
    pods, nodes = lane.pod_addresses(state), lane.node_addresses(state)
    between = [f for f in lane.ip_frames(frames) if f.src in nodes and f.dst in nodes]
    assert between, "no traffic between the nodes was captured"
    for frame in lane.ip_frames(frames):
        assert frame.src not in pods and frame.dst not in pods, frame
    ports = {wgnl_port(state, f.dst.version) for f in between}
    for frame in between:
        for pod in pods:
            assert pod.packed not in frame.raw, f"{pod} in the clear: {frame}"
        if frame.proto == 58 and frame.payload[:1] in (b"\x87", b"\x88"):
            continue  # IPv6 neighbour discovery between the nodes' own addresses
        assert frame.proto == 17, frame  # UDP only
        sport, dport = int.from_bytes(frame.payload[0:2]), int.from_bytes(frame.payload[2:4])
        assert sport in ports and dport in ports, (sport, dport)


def wgnl_port(_state: cluster.ClusterState, version: int) -> int:
    return 51821 if version == 6 else 51820


def test_keys_leases_peers_and_mtu(state: cluster.ClusterState) -> None:
    etcd = state.etcd()
    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    versions: list[int] = [4, 6] if state.family == "dual" else [4]
    keys = {}
    for node in state.nodes:
        path = Path(node.dir) / "wgkey"
        info = os.stat(path, follow_symlinks=False)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        public = wgkey.encode(wgkey.public_key(wgkey.decode(path.read_text())))
        keys[node.name] = public
        for subnet in node.subnets():
            kv = etcd.get(store.key(ipaddress.ip_network(subnet)))
            assert kv is not None
            data = json.loads(kv.value)["BackendData"]
            port = wgnl_port(state, ipaddress.ip_network(subnet).version)
            assert data == {"PublicKey": public, "ListenPort": port}
        mtu = read_subnet_env(node.subnet_file).mtu
        assert mtu == 1500 - (80 if state.family == "dual" else 60)
    for node in state.nodes:
        for version in versions:
            device = _device(node, version)
            assert wgkey.encode(device.public_key) == keys[node.name]
            assert device.listen_port == wgnl_port(state, version)
            others = [n for n in state.nodes if n is not node]
            assert {wgkey.encode(k) for k in device.peers} == {keys[n.name] for n in others}
            for other in others:
                peer = device.peers[wgkey.decode(keys[other.name])]
                address = other.address6 if version == 6 else other.address
                assert peer.endpoint == (ipaddress.ip_address(address), wgnl_port(state, version))
                subnets = [s for s in other.subnets() if ipaddress.ip_network(s).version == version]
                assert [str(a) for a in peer.allowed] == subnets
                assert peer.keepalive == KEEPALIVE


def test_a_node_that_leaves_is_removed_from_its_peers(state: cluster.ClusterState) -> None:
    node1, node2, node3 = state.nodes
    gone = wgkey.decode(Path(node3.dir, "wgkey").read_text())
    subnets = node3.subnets()
    lane.leave(state, node3)

    def removed() -> bool:
        for node in (node1, node2):
            routes = cluster.node_routes(node)
            if any(s in routes for s in subnets):
                return False
            if any(
                gone in _device(node, v).peers for v in ([4, 6] if state.family == "dual" else [4])
            ):
                return False
        return True

    wait_for(removed, 60, "node3 to be removed from its peers", lambda: lane.logs(state))
    pod1, pod2 = state.pods[0], state.pods[1]
    assert lane.reaches(pod1.name, pod2.address)
