"""bridge and ptp ADD/CHECK/DEL on the fake host (tests/plugin_logic.py): no root, no netns.

What the fake ends up with is the plugin's decision: the bridge and its gateway address, the
veth pair and which end is where, the pod's addresses and routes, the node's routes and
forwarding switches, the sysctls of the host ends. ipMasq and macspoofchk (nftables) are not
faked and stay out of these configs.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    POD,
    assert_each_step_rolls_back,
    failed,
    ok,
    picture,
    with_prev,
)

STATIC = {
    "type": "static",
    "addresses": [{"address": "10.22.0.5/24", "gateway": "10.22.0.1"}],
}


def bridge_conf(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "br-net",
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipam": STATIC,
        **extra,
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def test_bridge_add_builds_bridge_veth_gateway_and_pod_config() -> None:
    host = new_host()
    result = ok(host, "bridge", "ADD", bridge_conf())
    node = host.kernel()
    bridge = node.find_link("cni0")
    assert bridge is not None and bridge.kind == "bridge" and bridge.up
    host_end = next(x for x in node.links() if x.kind == "veth")
    assert host_end.master == bridge.index and host_end.up
    assert host_end.name.startswith("veth") and len(host_end.name) == 12
    assert [str(a.interface) for a in node.addresses(index=bridge.index)] == ["10.22.0.1/24"]
    assert node.forwarding(2) == 1  # isGateway turns ip_forward on, through the node's sysctl
    view = picture(host)
    host_v6 = dict(view["node"]["conf"][host_end.name][1])
    assert host_v6["disable_ipv6"] == "1"  # hostVethIPv6 off
    assert dict(view["node"]["conf"]["cni0"][1])["accept_ra"] == "0"
    pod = view[POD]
    assert ("eth0", "10.22.0.5/24", 0) in pod["addresses"]
    assert ("0.0.0.0/0", "eth0", "10.22.0.1", 3, 0, 1, None, "", 0) not in pod["routes4"]
    ipv4_conf, ipv6_conf = (dict(x) for x in pod["conf"]["eth0"])
    assert ipv4_conf["arp_notify"] == "1"  # set over netlink: the same state as the sysctl
    assert ipv6_conf["accept_dad"] == "0"  # enabledad off
    assert ipv6_conf["enhanced_dad"] == "1"
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.up and eth0.kind == "veth"
    assert eth0.peer_index == host_end.index
    names = [i["name"] for i in result["interfaces"]]
    assert names == ["cni0", host_end.name, "eth0"]
    assert result["interfaces"][2] == {"name": "eth0", "mac": eth0.mac, "sandbox": POD}
    assert result["ips"] == [{"address": "10.22.0.5/24", "gateway": "10.22.0.1", "interface": 2}]
    ok(host, "bridge", "CHECK", with_prev(bridge_conf(), result))


def test_bridge_default_gateway_route_in_the_pod() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", bridge_conf(isDefaultGateway=True))
    routes = picture(host)[POD]["routes4"]
    assert ("0.0.0.0/0", "eth0", "10.22.0.1", 3, 0, 1, None, "", 0) in routes


def test_bridge_check_fails_on_a_changed_state() -> None:
    host = new_host()
    result = ok(host, "bridge", "ADD", bridge_conf())
    prev = with_prev(bridge_conf(), result)
    node = host.kernel()
    bridge = node.find_link("cni0")
    assert bridge is not None
    node.set_link(bridge.index, flags=0x100, flag_mask=0x100)  # promisc, not configured
    assert "configured Promisc Mode false doesn't match current state: true" in failed(
        host, "bridge", "CHECK", prev
    )
    node.set_link(bridge.index, flags=0, flag_mask=0x100)
    host_end = next(x for x in node.links() if x.kind == "veth")
    node.set_link(host_end.index, master=0)
    assert failed(host, "bridge", "CHECK", prev) == "CNI veth created for bridge cni0 was not found"
    node.set_link(host_end.index, master=bridge.index)
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.delete_address(eth0.index, ipaddress.ip_interface("10.22.0.5/24"))
    assert failed(host, "bridge", "CHECK", prev) == (
        "Failed to match addr 10.22.0.5/24 on interface eth0"
    )


def test_bridge_del_is_idempotent_and_keeps_the_bridge() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", bridge_conf())
    ok(host, "bridge", "DEL", bridge_conf())
    node = host.kernel()
    assert [x.name for x in node.links()] == ["lo", "cni0"]  # the node's share stays
    assert host.kernel(POD).find_link("eth0") is None
    after = picture(host)
    ok(host, "bridge", "DEL", bridge_conf())
    assert picture(host) == after
    # (a DEL without the namespace also clears macspoofchk's nftables rules, on the real
    # machine: the integration suite covers it)


def test_bridge_refuses_a_node_link_of_that_name_that_is_no_bridge() -> None:
    host = new_host()
    host.kernel().add_dummy("cni0")
    before = picture(host)
    assert failed(host, "bridge", "ADD", bridge_conf()) == (
        'failed to create bridge "cni0": "cni0" already exists but is not a bridge'
    )
    assert picture(host) == before


def test_bridge_vlan_puts_the_port_in_the_vlan() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", bridge_conf(vlan=100, isGateway=False))
    node = host.kernel()
    host_end = next(x for x in node.links() if x.kind == "veth")
    assert node.port_vlans(host_end.index) == [100]


def test_bridge_a_failure_at_each_step_leaves_node_and_pod_as_they_were() -> None:
    host = new_host()
    steps = assert_each_step_rolls_back(host, "bridge", bridge_conf(), minimum=6)
    assert steps[:3] == ["bridge", "veth", "port"]


def test_bridge_l2_a_failure_at_each_step_leaves_node_and_pod_as_they_were() -> None:
    host = new_host()
    conf = bridge_conf(isGateway=False, hairpinMode=True)
    del conf["ipam"]
    steps = assert_each_step_rolls_back(host, "bridge", conf)
    assert "container-up" in steps


def ptp_conf(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "ptp-net",
        "type": "ptp",
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.33.0.5/24", "gateway": "10.33.0.1"}],
        },
        **extra,
    }


def test_ptp_add_routes_the_pod_through_its_host_end() -> None:
    host = new_host()
    result = ok(host, "ptp", "ADD", ptp_conf(mtu=1400))
    node = host.kernel()
    host_end = next(x for x in node.links() if x.kind == "veth")
    assert host_end.mtu == 1400
    view = picture(host)
    assert (host_end.name, "10.33.0.1/32", 0) in view["node"]["addresses"]
    assert any(r[0] == "10.33.0.5/32" and r[1] == host_end.name for r in view["node"]["routes4"])
    assert node.forwarding(2) == 1
    pod_routes = {(r[0], r[2]) for r in view[POD]["routes4"]}
    assert ("10.33.0.1/32", "") in pod_routes
    assert ("10.33.0.0/24", "10.33.0.1") in pod_routes
    assert [i["name"] for i in result["interfaces"]] == [host_end.name, "eth0"]
    ok(host, "ptp", "CHECK", with_prev(ptp_conf(mtu=1400), result))
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.delete_address(eth0.index, ipaddress.ip_interface("10.33.0.5/24"))
    assert "Failed to match addr 10.33.0.5/24" in failed(
        host, "ptp", "CHECK", with_prev(ptp_conf(mtu=1400), result)
    )


def test_ptp_del_is_idempotent() -> None:
    host = new_host()
    before = picture(host)
    ok(host, "ptp", "ADD", ptp_conf())
    ok(host, "ptp", "DEL", ptp_conf())
    after = picture(host)
    assert after["node"]["links"] == before["node"]["links"]
    assert after[POD] == before[POD]
    ok(host, "ptp", "DEL", ptp_conf())
    host.remove_pod(POD)
    ok(host, "ptp", "DEL", ptp_conf())


def test_ptp_a_failure_at_each_step_leaves_node_and_pod_as_they_were() -> None:
    host = new_host()
    steps = assert_each_step_rolls_back(host, "ptp", ptp_conf())
    assert steps[:3] == ["ipam", "forwarding", "veth"]


def test_bridge_dual_stack_gateways_and_forwarding() -> None:
    host = new_host()
    ipam = {
        "type": "static",
        "addresses": [
            {"address": "10.22.0.5/24", "gateway": "10.22.0.1"},
            {"address": "fd22::5/64", "gateway": "fd22::1"},
        ],
    }
    result = ok(host, "bridge", "ADD", bridge_conf(ipam=ipam, isDefaultGateway=True))
    node = host.kernel()
    bridge = node.find_link("cni0")
    assert bridge is not None
    assert sorted(str(a.interface) for a in node.addresses(index=bridge.index)) == [
        "10.22.0.1/24",
        "fd22::1/64",
    ]
    assert (node.forwarding(2), node.forwarding(10)) == (1, 1)
    pod = picture(host)[POD]
    assert ("eth0", "fd22::5/64", 0) in pod["addresses"]
    assert dict(pod["conf"]["eth0"][1])["keep_addr_on_down"] == "1"
    assert ("::/0", "eth0", "fd22::1", 3, 0, 1, 1024, "", 0) in pod["routes6"]
    ok(host, "bridge", "CHECK", with_prev(bridge_conf(ipam=ipam, isDefaultGateway=True), result))
