"""What the full-kernel cluster tests share: a 3-node playground cluster (1 pod each) of one
backend, a capture of every frame on the underlay, and pings between all pods."""

from __future__ import annotations

import ipaddress
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pycni import playground
from pycni.playground import cluster
from tests import harness

TTL = 30  # renewals every 10 s: agents starved by TCG must not lose their leases
RECONCILE = 5.0  # changes arrive by watch events; full passes cost CPU the guest lacks

CAPTURE = r"""
import json, os, select, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
print("ready", flush=True)
frames = []
while True:  # until stdin closes: the pings are done
    ready, _, _ = select.select([s, sys.stdin], [], [], 1.0)
    if s in ready:
        frames.append(s.recv(65535).hex())
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
        break
while True:  # what is still queued
    ready, _, _ = select.select([s], [], [], 0.5)
    if not ready:
        break
    frames.append(s.recv(65535).hex())
json.dump(frames, sys.stdout)
"""


def up(root: Path, backend: str, family: str = "ipv4") -> cluster.ClusterState:
    state = cluster.new_state(str(root), f"{harness.RUN_PREFIX}{backend[:2]}-")
    opts = cluster.UpOptions(
        nodes=3, pods_per_node=1, backend=backend, ttl=TTL, reconcile_interval=RECONCILE,
        family=family, wait=300.0,
    )  # fmt: skip
    try:
        cluster.up(state, opts, lambda _line: None)
    except cluster.ClusterError as exc:
        # the guest's files are gone with it: say here what the agents and etcd said
        etcd_log = Path(state.path("etcd.log"))
        text = f"{exc}\n{logs(state)}\n--- etcd\n"
        text += etcd_log.read_text(errors="replace")[-2000:] if etcd_log.exists() else ""
        down(state)
        raise AssertionError(text) from None
    except BaseException:
        down(state)
        raise
    return state


def down(state: cluster.ClusterState) -> None:
    """``cluster.down`` less the pods' CNI DEL (a Python start per pod: minutes under TCG):
    the guest and everything in it are thrown away after the run, and DEL is tested on the
    host. Agents and etcd stop, every namespace made goes."""
    for node in state.nodes:
        cluster.stop_agent(state, node, hard=True)
    cluster.stop_etcd(state, hard=True)
    playground.remove_namespaces(state.created, cluster.ClusterError)
    shutil.rmtree(state.root, ignore_errors=True)


def logs(state: cluster.ClusterState) -> str:
    return "\n".join(
        f"--- {n.name}\n{Path(n.agent_log).read_text(errors='replace')[-3000:]}"
        for n in state.nodes
        if Path(n.agent_log).exists()
    )


@dataclass
class Frame:
    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    proto: int
    payload: bytes  # after the outer IP header
    raw: bytes


def ip_frames(frames: list[str]) -> Iterator[Frame]:
    """The IPv4 and IPv6 packets among captured Ethernet frames (outer headers)."""
    for text in frames:
        raw = bytes.fromhex(text)
        ethertype = struct.unpack_from("!H", raw, 12)[0] if len(raw) >= 14 else 0
        if ethertype == 0x0800 and len(raw) >= 34:
            ihl = (raw[14] & 0x0F) * 4
            yield Frame(
                ipaddress.IPv4Address(raw[26:30]), ipaddress.IPv4Address(raw[30:34]),
                raw[23], raw[14 + ihl :], raw,
            )  # fmt: skip
        elif ethertype == 0x86DD and len(raw) >= 54:
            yield Frame(
                ipaddress.IPv6Address(raw[22:38]), ipaddress.IPv6Address(raw[38:54]),
                raw[20], raw[54:], raw,
            )  # fmt: skip


def ping_all_captured(
    state: cluster.ClusterState,
) -> tuple[dict[str, bool], list[str]]:
    """Every pod pings every other pod's addresses while the underlay namespace captures
    every frame; returns (result per "from -> to", the frames as hex)."""
    capture = subprocess.Popen(
        ["nsenter", f"--net={playground.netns_path(state.underlay_ns)}", "--",
         sys.executable, "-c", CAPTURE],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert capture.stdout is not None and capture.stdout.readline().strip() == "ready"
    results: dict[str, bool] = {}
    try:
        for pod in state.pods:
            for other in state.pods:
                if other is pod:
                    continue
                for address in filter(None, (other.address, other.address6)):
                    key = f"{pod.name} -> {address}"
                    results[key] = reaches(pod.name, address)
    finally:
        out, _ = capture.communicate(timeout=300)  # closes stdin: the capture ends
    return results, json.loads(out)


def reaches(namespace: str, address: str) -> bool:
    """Whether a ping from ``namespace`` gets an answer from ``address``: under TCG a
    first WireGuard handshake or a neighbour resolution can outlast one ping's wait, so a
    few are sent (an unreachable address fails them all)."""
    ns = harness.Namespace(namespace)
    return any(ns.ping(address, count=3, timeout=10) for _ in range(3))


def pod_addresses(
    state: cluster.ClusterState,
) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return {ipaddress.ip_address(a) for p in state.pods for a in (p.address, p.address6) if a}


def node_addresses(
    state: cluster.ClusterState,
) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return {ipaddress.ip_address(a) for n in state.nodes for a in (n.address, n.address6) if a}


def leave(state: cluster.ClusterState, node: cluster.NodeState) -> None:
    """``node`` leaves the cluster: its agent stops and its etcd lease ends (as after a
    drain, or a TTL without renewals)."""
    etcd = state.etcd()
    from pycni.cluster.lease import LeaseStore

    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    cluster.stop_agent(state, node)
    for subnet in node.subnets():
        kv = etcd.get(store.key(ipaddress.ip_network(subnet)))
        if kv is not None and kv.lease:
            etcd.revoke(kv.lease)
