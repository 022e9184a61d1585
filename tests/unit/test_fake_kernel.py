"""FakeKernel (pycni.net.netlink.fake_kernel) answers the contract's cases as the real kernel did.

The cases and the kernel's answers are in tests/kernel_contract.py; the kernel suite checks
the native client against the same answers (tests/integration/test_fake_kernel_contract.py).
No root, no namespaces: this module runs in well under a second.
"""

from __future__ import annotations

import errno
import ipaddress

import pytest

from pycni.net.netlink.fake_kernel import FakeKernel, FakeMachine
from pycni.net.netlink.kernel import AF_INET, IFF_UP, Kernel, NetlinkError, Route, Tbf
from tests.kernel_contract import CASES, EXPECTED, VRF_CASES, VRF_EXPECTED, Side

IP = ipaddress.ip_address
NET = ipaddress.ip_network
IFACE = ipaddress.ip_interface


def fake_side() -> Side:
    host = FakeMachine()
    node, pod = host.namespace(), host.namespace()
    side = Side(FakeKernel(node), FakeKernel(pod), node.fd, pod.fd, node.sysctl, pod.sysctl)
    side.pod_tap = FakeKernel(pod).add_tap
    return side


def test_every_case_has_the_kernels_answer() -> None:
    assert set(CASES) == set(EXPECTED)
    assert set(VRF_CASES) == set(VRF_EXPECTED)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fake_answers_as_the_kernel_did(name: str) -> None:
    assert CASES[name](fake_side()) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(VRF_CASES))
def test_fake_answers_as_a_kernel_with_vrf_did(name: str) -> None:
    """Recorded in the full-kernel lane (tests/fullkernel/test_fake_kernel_vrf_contract.py)."""
    assert VRF_CASES[name](fake_side()) == VRF_EXPECTED[name]


def test_fake_is_a_kernel() -> None:
    """What the type checker proves (the module's _check line) holds at run time too: every
    method of the Protocol is there."""
    protocol = {n for n in vars(Kernel) if not n.startswith("_")}
    assert protocol and protocol <= set(dir(FakeKernel))


def test_refusals_are_netlink_errors_with_the_named_properties() -> None:
    side = fake_side()
    with pytest.raises(NetlinkError) as gone:
        side.node.link(4242)
    assert gone.value.no_such_link and isinstance(gone.value, OSError)
    assert str(gone.value) == str((errno.ENODEV, "No such device"))
    side.node.add_bridge("br0")
    with pytest.raises(NetlinkError) as twice:
        side.node.add_bridge("br0")
    assert twice.value.exists
    with pytest.raises(NetlinkError) as missing:
        side.node.delete_route(Route(NET("10.1.0.0/16")))
    assert missing.value.no_such_entry


def test_a_closed_client_refuses() -> None:
    side = fake_side()
    side.node.close()
    with pytest.raises(OSError) as exc:
        side.node.links()
    assert exc.value.errno == errno.EBADF


def test_an_unknown_namespace_fd_is_refused() -> None:
    side = fake_side()
    with pytest.raises(NetlinkError) as exc:
        side.node.add_veth("v0", "eth0", 12345)
    assert exc.value.errno == errno.EBADF
    assert side.node.find_link("v0") is None


def test_oper_state_follows_both_ends_of_a_veth() -> None:
    side = fake_side()
    side.node.add_veth("v0", "eth0", side.pod_fd)
    host, peer = side.node.find_link("v0"), side.pod.find_link("eth0")
    assert host is not None and peer is not None
    assert host.oper_state == "down"
    side.node.set_link(host.index, up=True)
    assert side.node.link(host.index).oper_state == "lowerlayerdown"
    side.pod.set_link(peer.index, up=True)
    now = side.node.link(host.index)
    assert now.oper_state == "up" and now.flags & IFF_UP
    assert now.peer_netnsid == side.node.netns_id(side.pod_fd) is not None


def test_bandwidth_objects() -> None:
    """The tc objects the bandwidth plugin makes, with the refusals its rollback relies on."""
    side = fake_side()
    k = side.node
    k.add_veth("bw0", "bw1", side.node_fd)
    k.add_ifb("bwi", 1500, 0)
    bw0, bwi = k.find_link("bw0"), k.find_link("bwi")
    assert bw0 is not None and bwi is not None and bwi.kind == "ifb" and bwi.txqlen == 0
    assert [q.kind for q in k.qdiscs(bw0.index)] == ["noqueue"]
    params = Tbf(rate=125_000, buffer=400_000, limit=51_200)
    k.add_tbf(bw0.index, 0x10000, params)
    with pytest.raises(NetlinkError) as exc:
        k.add_tbf(bw0.index, 0x10000, params)
    assert exc.value.exists
    with pytest.raises(NetlinkError):
        k.redirect_ingress(bw0.index, bwi.index)  # no ingress qdisc yet
    k.add_ingress(bw0.index)
    k.redirect_ingress(bw0.index, bwi.index)
    assert isinstance(k, FakeKernel) and k.redirect_of(bw0.index) == bwi.index
    assert {q.kind for q in k.qdiscs(bw0.index)} == {"tbf", "ingress"}
    k.delete_qdisc(bw0.index, 0xFFFFFFF1)
    assert k.redirect_of(bw0.index) is None
    k.delete_link(bwi.index)
    with pytest.raises(NetlinkError):
        k.redirect_ingress(bw0.index, bwi.index)


def test_vxlan_fdb_and_vlans() -> None:
    side = fake_side()
    k = side.node
    k.add_veth("un0", "un1", side.node_fd)
    un0 = k.find_link("un0")
    assert un0 is not None
    k.add_vxlan("vx0", 7, IP("10.1.0.1"), un0.index, 8472, 1450)
    with pytest.raises(NetlinkError) as same_vni:
        k.add_vxlan("vx1", 7, IP("10.1.0.1"), un0.index, 8472, 1450)
    assert same_vni.value.exists
    vx = k.find_link("vx0")
    assert vx is not None and vx.vxlan is not None and vx.vxlan.vni == 7 and vx.mtu == 1450
    k.set_fdb(vx.index, "02:00:00:00:00:01", IP("10.1.0.2"))
    assert [(e.mac, e.remote) for e in k.fdb_entries(vx.index)] == [
        ("02:00:00:00:00:01", IP("10.1.0.2"))
    ]
    k.delete_fdb(vx.index, "02:00:00:00:00:01", IP("10.1.0.2"))
    with pytest.raises(NetlinkError) as gone:
        k.delete_fdb(vx.index, "02:00:00:00:00:01", IP("10.1.0.2"))
    assert gone.value.no_such_entry
    k.add_bridge("brv", vlan_filtering=True)
    brv = k.find_link("brv")
    assert brv is not None
    k.set_link(un0.index, master=brv.index)
    assert k.port_vlans(un0.index) == [1]
    k.add_port_vlan(un0.index, 10)
    k.delete_port_vlan(un0.index, 1)
    assert k.port_vlans(un0.index) == [10]
    strict = FakeKernel(FakeMachine(bridge_vlan_filtering=False).namespace())
    with pytest.raises(NetlinkError) as unsupported:
        strict.add_bridge("brv", vlan_filtering=True)
    assert unsupported.value.not_supported


def test_route_to_picks_the_longest_prefix() -> None:
    side = fake_side()
    k = side.node
    k.add_veth("rt0", "rt1", side.node_fd)
    rt0 = k.find_link("rt0")
    assert rt0 is not None
    k.set_link(rt0.index, up=True)
    k.add_address(rt0.index, IFACE("10.2.0.1/24"))
    k.add_route(Route(NET("10.3.0.0/16"), oif=rt0.index, gateway=IP("10.2.0.2")))
    k.add_route(Route(NET("10.3.1.0/24"), oif=rt0.index, gateway=IP("10.2.0.3")))
    (chosen,) = k.route_to(IP("10.3.1.9"))
    assert chosen.gateway == IP("10.2.0.3") and chosen.dst == NET("10.3.1.9/32")
    with pytest.raises(NetlinkError) as exc:
        k.route_to(IP("192.0.2.1"))
    assert exc.value.errno == errno.ENETUNREACH
    assert all(r.family == AF_INET for r in k.routes(AF_INET))
