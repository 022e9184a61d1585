"""A live node moved from the Go reference (plugins v1.9.1) to pycni, and back.

One private node namespace serves five networks with the same conflists on both sides:
bridge + ipMasq + portmap (the reference's default backend, iptables) + firewall + tuning +
bandwidth; bridge + ipMasq + portmap on the nftables backend; ptp + ipMasq + firewall +
tuning + bandwidth; macvlan; host-device. libcni (pycni.runtime) drives the chains, first
from v1.9.1's plugin directory, then from pycni's, with one cache and one host-local data dir.

Forward: v1.9.1's pods are CHECKed, one is garbage-collected after its runtime lost it, the
rest are DELeted by pycni; pycni's own pods meanwhile get other addresses; after the last DEL
the node is as it was before (its whole netfilter, link, address, route and qdisc state, the
IPAM and cache files). Reverse: pycni's pods, handed back with ``pycni migrate
--to-reference``, are CHECKed and DELeted by v1.9.1, and again nothing remains.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime import (
    CNIConfig,
    GCArgs,
    GCAttachment,
    RawExec,
    RuntimeConf,
    conf_list_from_bytes,
)
from pycni.spec.conf import NetworkConfigList
from tests import node_view
from tests.harness import Namespace, State
from tests.references import Reference

pytestmark = [pytest.mark.kernel]

# portmap's networks and their gateways; mig-gc (bridge + ipMasq + portmap, the reference's
# iptables defaults) holds a pod whose runtime lost both its namespace and its cache entry
MAPPED = {"mig-ipt": "10.91.1.1", "mig-nft": "10.91.2.1", "mig-gc": "10.91.6.1"}
TRAFFIC = ("mig-ipt", "mig-nft")
SERVER = (  # answers each TCP connection on port 80 with its pod's tag
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 80))\n"
    "s.listen()\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    c.sendall(sys.argv[1].encode())\n"
    "    c.close()\n"
)


def _host_local(state: State, subnet: str) -> dict[str, Any]:
    return {
        "type": "host-local",
        "subnet": subnet,
        "dataDir": str(state.data_dir),
        "routes": [{"dst": "0.0.0.0/0"}],
    }


def _chains(state: State) -> dict[str, dict[str, Any]]:
    tuning = {
        "type": "tuning",
        "dataDir": str(state.root / "tuning"),
        "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"},
    }
    bandwidth = {"type": "bandwidth", "capabilities": {"bandwidth": True}}
    firewall = {"type": "firewall", "dataDir": str(state.root / "firewall")}  # pycni's records
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True}
    plugins: dict[str, list[dict[str, Any]]] = {
        "mig-ipt": [
            {
                "type": "bridge",
                "bridge": "migbr1",
                "isGateway": True,
                "ipMasq": True,
                "ipam": _host_local(state, "10.91.1.0/24"),
            },
            portmap,
            firewall,
            tuning,
            bandwidth,
        ],
        "mig-nft": [
            {
                "type": "bridge",
                "bridge": "migbr2",
                "isGateway": True,
                "ipMasq": True,
                "ipMasqBackend": "nftables",
                "ipam": _host_local(state, "10.91.2.0/24"),
            },
            {**portmap, "backend": "nftables"},
        ],
        "mig-ptp": [
            {"type": "ptp", "ipMasq": True, "ipam": _host_local(state, "10.91.3.0/24")},
            firewall,
            tuning,
            bandwidth,
        ],
        "mig-mv": [
            {
                "type": "macvlan",
                "master": "migup0",
                "mode": "bridge",
                "ipam": _host_local(state, "10.91.4.0/24"),
            },
        ],
        "mig-hd": [
            {"type": "host-device", "ipam": _host_local(state, "10.91.5.0/24")},
        ],
        "mig-gc": [
            {
                "type": "bridge",
                "bridge": "migbr6",
                "isGateway": True,
                "ipMasq": True,
                # static: host-local's GC refuses while a process of another test on this
                # machine hides its namespaces (its node-wide safety scan, docs/security.md)
                "ipam": {"type": "static", "addresses": [{"address": "10.91.6.2/24"}]},
            },
            portmap,
        ],
    }
    return {
        name: {"cniVersion": "1.1.0", "name": name, "plugins": p} for name, p in plugins.items()
    }


class Node:
    """The node's networks, driven by libcni from one plugin directory at a time."""

    def __init__(self, node: Namespace, state: State, new_pod: Callable[[], Namespace]) -> None:
        self.node, self.state, self.new_pod = node, state, new_pod
        self.nets = {
            name: conf_list_from_bytes(json.dumps(conf).encode())
            for name, conf in _chains(state).items()
        }
        self.pods: dict[str, tuple[str, Namespace, str]] = {}  # cid: (net, pod, hd device)
        self.hd = 0
        self.ports: dict[str, int] = {}  # cid: its host port (each pod its own)
        self.servers: dict[str, subprocess.Popen[bytes]] = {}  # cid: its pod's server

    def cni(self, plugin_dir: Path) -> CNIConfig:
        return CNIConfig(
            [str(plugin_dir)], cache_dir=str(self.state.cache_dir), exec=RawExec(), timeout=60
        )

    def rt(self, cid: str) -> RuntimeConf:
        net, pod, _device = self.pods[cid]
        caps: dict[str, Any] = {}
        if net in MAPPED:
            port = self.ports.setdefault(cid, 18400 + len(self.ports))
            caps["portMappings"] = [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]
        if net in ("mig-ipt", "mig-ptp"):
            caps["bandwidth"] = {
                "ingressRate": 8_000_000,
                "ingressBurst": 16_000,
                "egressRate": 8_000_000,
                "egressBurst": 16_000,
            }
        return RuntimeConf(
            container_id=cid,
            netns=pod.path,
            ifname="eth0",
            args=(("IgnoreUnknown", "1"),),
            capability_args=caps,
        )

    def conf(self, cid: str) -> NetworkConfigList:
        net, _pod, device = self.pods[cid]
        if net != "mig-hd":
            return self.nets[net]
        raw = json.loads(json.dumps(_chains(self.state)[net]))
        raw["plugins"][0]["device"] = device
        return conf_list_from_bytes(json.dumps(raw).encode())

    def add(self, plugin_dir: Path, net: str, cid: str) -> str:
        device = ""
        if net == "mig-hd":
            self.hd += 1
            device = f"mighd{self.hd}"
            self.node.run(
                "ip", "link", "add", device, "type", "veth", "peer", "name", f"mighp{self.hd}"
            )
        self.pods[cid] = (net, self.new_pod(), device)
        with self.node.entered():
            result = self.cni(plugin_dir).add_network_list(self.conf(cid), self.rt(cid))
        return str(result.to_dict()["ips"][0]["address"])

    def stop(self, cid: str) -> None:
        server = self.servers.pop(cid, None)
        if server is not None:
            server.kill()
            server.wait()

    def serve(self, cid: str) -> None:
        """A TCP server in the pod answering its container ID (started, and listening)."""
        pod = self.pods[cid][1]
        self.servers[cid] = subprocess.Popen(
            ["nsenter", f"--net={pod.path}", "--", sys.executable, "-c", SERVER, cid],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30  # python starts slowly under load
        while ":80 " not in pod.run("ss", "-Hlnt", check=False).stdout:
            assert time.monotonic() < deadline, f"the server in {pod.name} did not start"
            time.sleep(0.05)

    def reached(self, cid: str) -> str:
        """What answers on the pod's host port, asked from the node at its gateway address
        (DNATed in the node's OUTPUT hook): the pod's container ID when the mapping works."""
        address = (MAPPED[self.pods[cid][0]], self.ports[cid])
        client = (
            "import socket, sys\n"
            "try:\n"
            "    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
            "    print(c.recv(256).decode())\n"
            "except OSError as e:\n"
            "    print('unreachable', e)\n"
        )
        return self.node.run(sys.executable, "-c", client, *map(str, address)).stdout.strip()

    def check(self, plugin_dir: Path, cid: str) -> None:
        with self.node.entered():
            self.cni(plugin_dir).check_network_list(self.conf(cid), self.rt(cid))

    def delete(self, plugin_dir: Path, cid: str) -> None:
        with self.node.entered():
            self.cni(plugin_dir).del_network_list(self.conf(cid), self.rt(cid))
        _net, pod, device = self.pods.pop(cid)
        pod.delete()
        if device:
            self.node.run("ip", "link", "del", device)

    def gc(self, plugin_dir: Path, net: str, conf: NetworkConfigList | None = None) -> None:
        """GC ``net`` with its live pods valid (``conf``: host-device's, naming the device of
        the stale attachment libcni deletes first)."""
        valid = [GCAttachment(cid, "eth0") for cid, (n, _p, _d) in self.pods.items() if n == net]
        with self.node.entered():
            self.cni(plugin_dir).gc_network_list(
                conf or self.nets[net], GCArgs(valid_attachments=valid)
            )


def _state(node: Namespace, state: State) -> dict[str, Any]:
    """The node's state that a migration must leave as it found it."""
    view = node_view.snapshot(node)
    for tool in ("iptables-legacy-save", "ip6tables-legacy-save"):
        view[tool] = node.run(tool, check=False).stdout.splitlines()
    # host-local's lock and allocation cursor (last_reserved_ip.N) stay, under both
    view["files"] = sorted(
        str(p.relative_to(state.root))
        for p in state.root.rglob("*")
        if p.is_file() and p.name != "lock" and not p.name.startswith("last_reserved_ip.")
    )
    return view


@pytest.fixture
def migrating(
    node: Namespace, pod_factory: Callable[[], Namespace], tmp_state: State
) -> Iterator[Node]:
    node.run("ip", "link", "set", "lo", "up")
    node.run("ip", "link", "add", "migup0", "type", "veth", "peer", "name", "migup1")
    node.run("ip", "link", "set", "migup0", "up")
    migrating = Node(node, tmp_state, pod_factory)
    try:
        yield migrating
    finally:
        for cid in list(migrating.servers):
            migrating.stop(cid)


def test_reference_node_moved_to_pycni_and_back(
    migrating: Node, upstream_reference: Reference, plugin_dir: Path
) -> None:
    n, old, new = migrating, upstream_reference.plugin_dir, plugin_dir
    nets = [net for net in n.nets if net != "mig-gc"]
    # warm-up: what each side leaves after its own last DEL (bridges, fixed scaffolding: the
    # other networks' plugins have none that firewall on mig-ipt does not make)
    for net in TRAFFIC:
        for side in (old, new):
            n.add(side, net, f"warm-{net}")
            n.delete(side, f"warm-{net}")
    n.add(old, "mig-gc", "warm-mig-gc")
    n.delete(old, "warm-mig-gc")
    initial = _state(n.node, n.state)

    olds = {net: [f"old-{net}-a", f"old-{net}-b"] for net in nets}
    used = set()
    for net, cids in olds.items():
        for cid in cids:
            used.add(n.add(old, net, cid))
    # a runtime lost the "b" pods: their namespaces are gone; pycni's GC frees what v1.9.1
    # made for them, keeps what it made for the "a" pods, whose CHECK then passes
    for net, cids in olds.items():
        conf = n.conf(cids[1])
        _net, pod, device = n.pods.pop(cids[1])
        pod.delete()
        if device:  # a veth: it went with the namespace, its peer too
            assert device not in n.node.links()
        n.gc(new, net, conf)
    for cids in olds.values():
        n.check(new, cids[0])
    # no cache entry either: only the plugins' GC can find what v1.9.1 made (portmap's and
    # ipMasq's iptables chains, by their comments)
    n.add(old, "mig-gc", "lost-mig-gc")
    _net, pod, _device = n.pods.pop("lost-mig-gc")
    pod.delete()
    (n.state.cache_dir / "results" / "mig-gc-lost-mig-gc-eth0").unlink()
    n.gc(new, "mig-gc")
    for net in nets:
        address = n.add(new, net, f"new-{net}")
        assert address not in used
        n.check(new, f"new-{net}")
    for net in TRAFFIC:  # v1.9.1's mappings and pycni's, side by side
        for cid in (olds[net][0], f"new-{net}"):
            n.serve(cid)
            assert n.reached(cid) == cid
    for cid in [c for cids in olds.values() for c in cids[:1]]:
        n.delete(new, cid)
    for net in nets:
        n.delete(new, f"new-{net}")
    node_view.assert_same(_state(n.node, n.state), initial, "after pycni's last DEL")

    # reverse: pycni's pods handed back to the reference, which ends where its own lifecycle
    # does (it keeps its empty ipMasq table, which pycni's last DEL removed)
    n.add(old, "mig-nft", "warm-mig-nft")
    n.delete(old, "warm-mig-nft")
    initial = _state(n.node, n.state)
    for net in nets:
        n.add(new, net, f"back-{net}")
    before_migrate = _state(n.node, n.state)
    migrate = [sys.executable, "-m", "pycni.cli.main", "migrate", "--to-reference"]
    migrate += ["--cache-dir", str(n.state.cache_dir)]
    dry = n.node.run(*migrate, "--dry-run").stdout
    assert _state(n.node, n.state) == before_migrate, "a dry run changed the node"
    done = n.node.run(*migrate).stdout
    assert done == dry
    print(done)
    again = n.node.run(*migrate).stdout
    assert again.startswith("nothing to hand back"), again
    for net in TRAFFIC:  # the handed-back mappings forward
        n.serve(f"back-{net}")
        assert n.reached(f"back-{net}") == f"back-{net}"
    for net in nets:
        n.check(old, f"back-{net}")
        n.delete(old, f"back-{net}")
    node_view.assert_same(_state(n.node, n.state), initial, "after v1.9.1's last DEL")
