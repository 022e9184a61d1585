# ruff: noqa: F811  (pytest fixtures imported from tests/plugins/bridge/support.py)
"""bridge on the real kernel: traffic, gateway, hairpin, isolation, masquerade, DEL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests.plugins.bridge.support import (  # noqa: F401
    bridge_dir,
    conf,
    host_veths,
    masq_rules,
    run,
    sysctl_in,
    wait_ping,
)

pytestmark = pytest.mark.kernel

DUAL = ("10.77.0.0/24", "fd77::/64")


def _ips(result: dict[str, Any]) -> list[str]:
    return [str(ip["address"]).split("/")[0] for ip in result["ips"]]


def test_two_pods_reach_each_other_and_the_gateway(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = conf(tmp_state, subnets=DUAL, isGateway=True)
    root_forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    a, b = pod_factory(), pod_factory()
    ra = run(bridge_dir, node, "ADD", c, a, cid="a").ok().json
    rb = run(bridge_dir, node, "ADD", c, b, cid="b").ok().json
    a4, _a6 = _ips(ra)
    b4, b6 = _ips(rb)
    assert (a4, b4) == ("10.77.0.2", "10.77.0.3")
    assert ra["interfaces"][0]["name"] == "cnibr0"
    assert all(ip["interface"] == 2 for ip in ra["ips"])
    assert sorted(node.addresses("cnibr0"))[:2] == ["10.77.0.1/24", "fd77::1/64"]
    assert sysctl_in(node, "net/ipv4/ip_forward") == "1"
    assert sysctl_in(node, "net/ipv6/conf/all/forwarding") == "1"
    # the write went to the node namespace only (sysctls under net/ are per namespace)
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == root_forward
    assert a.ping(b4)
    assert b.ping(a4)
    assert a.ping("10.77.0.1")
    assert wait_ping(a, b6)
    assert wait_ping(b, "fd77::1")
    veth = ra["interfaces"][1]["name"]
    assert veth.startswith("veth") and len(veth) == 12
    links = node.links()
    assert links[veth]["master"] == "cnibr0"
    run(bridge_dir, node, "DEL", c, a, cid="a").ok()
    assert veth not in node.links()
    assert not a.ping(b4, timeout=1)
    assert tmp_state.reservations("brnet") == sorted([b4, b6])
    run(bridge_dir, node, "DEL", c, b, cid="b").ok()
    assert tmp_state.reservations("brnet") == []
    assert host_veths(node) == []


def test_hairpin_and_isolation_flags(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = conf(tmp_state, isGateway=True, hairpinMode=True, portIsolation=True)
    pod = pod_factory()
    r = run(bridge_dir, node, "ADD", c, pod).ok().json
    veth = r["interfaces"][1]["name"]
    info = node.links()[veth]["linkinfo"]["info_slave_data"]
    assert info["hairpin"] is True
    assert info["isolated"] is True
    run(bridge_dir, node, "DEL", c, pod).ok()
    c2 = conf(tmp_state, isGateway=True)
    pod2 = pod_factory()
    r2 = run(bridge_dir, node, "ADD", c2, pod2, cid="c2").ok().json
    info2 = node.links()[r2["interfaces"][1]["name"]]["linkinfo"]["info_slave_data"]
    assert info2["hairpin"] is False
    assert info2["isolated"] is False
    run(bridge_dir, node, "DEL", c2, pod2, cid="c2").ok()


def _outside(node: harness.Namespace, pod_factory: Any) -> harness.Namespace:
    """An 'outside' namespace behind a node veth, with no route back to the pod subnet."""
    out = pod_factory()
    node.run("ip", "link", "add", "name", "uplink", "type", "veth", "peer", "name", "wan")
    node.run("ip", "link", "set", "wan", "netns", out.path)
    node.run("ip", "addr", "add", "192.168.77.1/24", "dev", "uplink")
    node.run("ip", "link", "set", "uplink", "up")
    out.run("ip", "addr", "add", "192.168.77.2/24", "dev", "wan")
    out.run("ip", "link", "set", "wan", "up")
    return out


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
def test_masquerade_rewrites_traffic_leaving_the_node(
    backend: str,
    bridge_dir: Path,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
) -> None:
    out = _outside(node, pod_factory)
    plain = conf(tmp_state, name="nomasq", isDefaultGateway=True, subnets=("10.78.0.0/24",))
    plain["bridge"] = "cnibr1"
    p0 = pod_factory()
    run(bridge_dir, node, "ADD", plain, p0, cid="p0").ok()
    # the outside has no route to 10.78.0.0/24: without masquerading no reply comes back
    assert not p0.ping("192.168.77.2", timeout=1)

    c = conf(tmp_state, isDefaultGateway=True, ipMasq=True, ipMasqBackend=backend)
    pod = pod_factory()
    run(bridge_dir, node, "ADD", c, pod).ok()
    assert pod.ping("192.168.77.2")
    # the outside saw the node's address as source
    entries = node.run("conntrack", "-L", "-p", "icmp", check=False).stdout
    assert "src=10.77.0.2 dst=192.168.77.2" in entries
    assert "dst=192.168.77.1" in entries
    if backend == "nftables":
        assert len(masq_rules(node)) == 1
    else:
        saved = node.run("iptables-save", "-t", "nat").stdout
        assert "-A POSTROUTING -s 10.77.0.2/32" in saved
    run(bridge_dir, node, "DEL", c, pod).ok()
    assert masq_rules(node) == []
    assert ":CNI-" not in node.run("iptables-save", "-t", "nat").stdout
    run(bridge_dir, node, "DEL", plain, p0, cid="p0").ok()
    assert out.exists()


def test_l2_mode_without_ipam(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = conf(tmp_state, ipam={})
    a, b = pod_factory(), pod_factory()
    ra = run(bridge_dir, node, "ADD", c, a, cid="a").ok().json
    run(bridge_dir, node, "ADD", c, b, cid="b").ok()
    assert "ips" not in ra or ra["ips"] == []
    assert len(ra["interfaces"]) == 3
    a.run("ip", "addr", "add", "10.5.0.1/24", "dev", "eth0")
    b.run("ip", "addr", "add", "10.5.0.2/24", "dev", "eth0")
    assert a.ping("10.5.0.2")
    run(bridge_dir, node, "DEL", c, a, cid="a").ok()
    run(bridge_dir, node, "DEL", c, b, cid="b").ok()
    assert host_veths(node) == []


def test_disable_container_interface_leaves_it_down(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = conf(tmp_state, ipam={}, disableContainerInterface=True)
    pod = pod_factory()
    run(bridge_dir, node, "ADD", c, pod).ok()
    assert "UP" not in pod.links()["eth0"]["flags"]
    run(bridge_dir, node, "DEL", c, pod).ok()


def test_mac_precedence_mtu_promisc_dns_and_macspoofchk(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = conf(
        tmp_state,
        mtu=1400,
        promiscMode=True,
        macspoofchk=True,
        dns={"nameservers": ["10.77.0.53"], "search": ["svc.local"]},
        args={"cni": {"mac": "0a:00:00:00:00:02"}},
        runtimeConfig={"mac": "0a:00:00:00:00:03"},
    )
    pod = pod_factory()
    r = run(bridge_dir, node, "ADD", c, pod, cni_args="IgnoreUnknown=1;MAC=0a:00:00:00:00:01")
    r.ok()
    res = r.json
    assert res["interfaces"][2]["mac"] == "0a:00:00:00:00:03"
    assert pod.links()["eth0"]["address"] == "0a:00:00:00:00:03"
    assert pod.links()["eth0"]["mtu"] == 1400
    assert node.links()["cnibr0"]["mtu"] == 1400
    assert "PROMISC" in node.links()["cnibr0"]["flags"]
    assert res["dns"] == {"nameservers": ["10.77.0.53"], "search": ["svc.local"]}
    chains = node.run("nft", "list", "table", "bridge", "nat").stdout
    assert "cni-br-iface-ctr1-eth0-mac" in chains
    assert "ether saddr 0a:00:00:00:00:03 return" in chains
    # the real MAC passes, a spoofed source MAC is dropped at the bridge port
    other = pod_factory()
    c_other = dict(c, macspoofchk=False, runtimeConfig={}, args={})
    peer = run(bridge_dir, node, "ADD", c_other, other, cid="other").ok().json
    peer_ip = peer["ips"][0]["address"].split("/")[0]
    assert pod.ping(peer_ip)
    pod.run("ip", "link", "set", "eth0", "address", "0a:00:00:00:00:09")
    pod.run("ip", "neigh", "flush", "all")
    other.run("ip", "neigh", "flush", "all")
    assert not pod.ping(peer_ip, timeout=1)
    run(bridge_dir, node, "DEL", c, pod).ok()
    run(bridge_dir, node, "DEL", c_other, other, cid="other").ok()
    assert "cni-br-iface" not in node.run("nft", "list", "ruleset").stdout
