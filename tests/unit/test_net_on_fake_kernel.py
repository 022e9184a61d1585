"""net/ helpers that plugins build their ADD/DEL/CHECK from, on the in-memory FakeKernel.

No root, no namespaces: what these helpers decide (conflicts, no-ops, who owns a route, which
priority a rule gets) runs against pycni.net.netlink.fake_kernel, whose answers are held to the real
kernel's by tests/kernel_contract.py. The helpers that write sysctls are handed the fake
namespace's FakeSysctl (pycni.net.sysctl), never the machine's /proc/sys.
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from pycni.net import bridge, owned_routes, route
from pycni.net.addr import AddressError, configure_iface
from pycni.net.netlink.fake_kernel import FakeKernel, FakeMachine
from pycni.net.netlink.kernel import AF_INET, MAIN_TABLE, Route
from pycni.plugins.meta.sbr import policy as rules
from pycni.spec.result import Interface, IPConfig, Result
from pycni.spec.result import Route as ResultRoute

IP = ipaddress.ip_address
NET = ipaddress.ip_network
IFACE = ipaddress.ip_interface


def node_with_veth() -> tuple[FakeKernel, int]:
    host = FakeMachine()
    ns = host.namespace()
    kernel = FakeKernel(ns)
    kernel.add_veth("eth0", "peer0", ns.fd)
    found = kernel.find_link("eth0")
    assert found is not None
    return kernel, found.index


def test_veth_pair_host_end_has_txqlen_0_and_pod_end_the_default() -> None:
    """As v1.9.1's pkg/ip leaves them (docs/differences-from-reference.md)."""
    from pycni.net import veth

    host = FakeMachine()
    node, pod = host.namespace(), host.namespace()
    kernel = FakeKernel(node)
    pair = veth.create_pair(kernel, node.sysctl, pod.fd, "eth0")
    assert kernel.link(pair.host_index).txqlen == 0
    made = FakeKernel(pod).find_link("eth0")
    assert made is not None and made.txqlen == 1000


def test_bridge_address_is_added_once_and_pins_the_mac() -> None:
    host = FakeMachine()
    ns = host.namespace()
    k = FakeKernel(ns)
    k.add_bridge("cni0")
    assert bridge.ensure_addr(k, "cni0", IFACE("10.22.0.1/24"), force=False)
    assert not bridge.ensure_addr(k, "cni0", IFACE("10.22.0.1/24"), force=False)  # no-op
    with pytest.raises(bridge.AddressConflict):
        bridge.ensure_addr(k, "cni0", IFACE("10.23.0.1/24"), force=False)
    br = k.find_link("cni0")
    assert br is not None
    assert [str(a.interface) for a in k.addresses(index=br.index)] == ["10.22.0.1/24"]
    mac = br.mac
    # the MAC was set on the bridge itself: a port with a lower MAC no longer changes it
    k.add_veth("vp0", "vq0", ns.fd, 0, "02:00:00:00:00:01")
    port = k.find_link("vq0")
    assert port is not None
    k.set_link(port.index, master=br.index)
    assert k.link(br.index).mac == mac
    assert bridge.ensure_addr(k, "cni0", IFACE("10.23.0.1/24"), force=True)
    assert [str(a.interface) for a in k.addresses(index=br.index)] == ["10.23.0.1/24"]


def test_an_unused_bridge_is_removed_and_a_used_one_kept() -> None:
    host = FakeMachine()
    ns = host.namespace()
    k = FakeKernel(ns)
    k.add_bridge("cni0")
    k.add_veth("vp0", "vq0", ns.fd)
    br, vp0 = k.find_link("cni0"), k.find_link("vp0")
    assert br is not None and vp0 is not None
    k.set_link(vp0.index, master=br.index)
    bridge.delete_if_unused(k, "cni0")
    assert k.find_link("cni0") is not None
    k.delete_link(vp0.index)
    bridge.delete_if_unused(k, "cni0")
    assert k.find_link("cni0") is None
    bridge.delete_if_unused(k, "cni0")  # gone already: nothing to do
    bridge.remove_addr(k, "cni0", IFACE("10.22.0.1/24"))


def test_configure_iface_adds_addresses_then_routes_via_the_gateway() -> None:
    k, eth0 = node_with_veth()
    result = Result(
        interfaces=[Interface(name="eth0")],
        ips=[IPConfig(IFACE("10.30.0.5/24"), gateway=IP("10.30.0.1"), interface=0)],
        routes=[ResultRoute(NET("0.0.0.0/0")), ResultRoute(NET("10.31.0.0/16"), priority=5)],
    )
    configure_iface(k, k.ns.sysctl, "eth0", eth0, result)
    assert k.link(eth0).up
    assert [str(a.interface) for a in k.addresses(index=eth0)] == ["10.30.0.5/24"]
    main = {str(r.dst): r for r in k.routes(AF_INET, table=MAIN_TABLE)}
    assert main["0.0.0.0/0"].gateway == IP("10.30.0.1") and main["0.0.0.0/0"].proto == 3
    assert main["10.31.0.0/16"].priority == 5
    assert main["10.30.0.0/24"].proto == 2  # the kernel's own prefix route
    route.validate_routes(k, "eth0", result.routes)
    k.delete_route(Route(NET("10.31.0.0/16"), oif=eth0))
    with pytest.raises(route.RouteError):
        route.validate_routes(k, "eth0", result.routes)


def test_configure_iface_refuses_an_address_of_another_interface() -> None:
    k, eth0 = node_with_veth()
    result = Result(
        interfaces=[Interface(name="eth1")],
        ips=[IPConfig(IFACE("10.30.0.5/24"), interface=0)],
    )
    with pytest.raises(AddressError, match="invalid interface index"):
        configure_iface(k, k.ns.sysctl, "eth0", eth0, result)
    assert k.addresses(index=eth0) == []


def test_configure_iface_reports_a_route_the_kernel_refuses() -> None:
    k, eth0 = node_with_veth()
    result = Result(
        interfaces=[Interface(name="eth0")],
        ips=[IPConfig(IFACE("10.30.0.5/24"), interface=0)],
        routes=[ResultRoute(NET("10.40.0.0/16"), gw=IP("10.99.0.1"))],  # not on-link
    )
    with pytest.raises(route.RouteError, match=re.escape("10.40.0.0/16 via 10.99.0.1 dev eth0")):
        configure_iface(k, k.ns.sysctl, "eth0", eth0, result)


def test_owned_routes_never_touch_another_programs_route() -> None:
    k, eth0 = node_with_veth()
    k.set_link(eth0, up=True)
    k.add_address(eth0, IFACE("10.50.0.1/24"))
    theirs = Route(NET("10.60.0.0/16"), oif=eth0, gateway=IP("10.50.0.2"), proto=3)
    k.add_route(theirs)
    ours = owned_routes.OwnedRoute(NET("10.60.0.0/16"), IP("10.50.0.9"), eth0)
    assert not owned_routes.add(k, ours)  # someone else's destination: left alone
    owned_routes.delete(k, ours)  # names our protocol: the kernel finds nothing to delete
    (kept,) = [r for r in k.routes(AF_INET, table=MAIN_TABLE) if r.dst == theirs.dst]
    assert kept.proto == 3 and kept.gateway == IP("10.50.0.2")
    mine = owned_routes.OwnedRoute(NET("10.61.0.0/16"), IP("10.50.0.9"), eth0)
    assert owned_routes.add(k, mine)
    assert [str(f.dst) for f in owned_routes.foreign(k)] == ["10.50.0.0/24", "10.60.0.0/16"]
    owned_routes.delete(k, mine)
    assert NET("10.61.0.0/16") not in {r.dst for r in k.routes(AF_INET)}


def test_source_rules_take_the_kernels_priorities_in_turn() -> None:
    """sbr's rules: each one below the previous, as the kernel would pick."""
    k, _ = node_with_veth()
    rules.add_source_rule(k, IFACE("10.70.0.5/24"), 100)
    rules.add_source_rule(k, IFACE("10.70.0.6/24"), 101)
    mine = [(r.priority, r.table, str(r.src)) for r in k.rules(AF_INET) if r.src is not None]
    assert mine == [(32764, 101, "10.70.0.6/32"), (32765, 100, "10.70.0.5/32")]
    assert rules.next_free_table({r.table for r in rules.rules(k)}, 100) == 102
