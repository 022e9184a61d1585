"""The agent's cheap path: ``owned_routes.update`` changes only what differs and never
displaces a route that is not the agent's; the default route's link is read natively."""

from __future__ import annotations

import ipaddress

import pytest

from pycni.net import owned_routes
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import Kernel
from pycni.net.netlink.kernel_changes import KernelChanges
from tests.harness import Namespace

pytestmark = pytest.mark.kernel

A = ipaddress.ip_network("10.244.1.0/24")
B = ipaddress.ip_network("10.244.2.0/24")
C = ipaddress.ip_network("10.244.3.0/24")


def _index(kernel: Kernel, name: str) -> int:
    found = kernel.find_link(name)
    assert found is not None, name
    return found.index


def _route(dst: ipaddress.IPv4Network, gw: str, oif: int) -> owned_routes.OwnedRoute:
    return owned_routes.OwnedRoute(dst, ipaddress.ip_address(gw), oif)


def test_update_touches_only_the_differences_and_leaves_foreign_routes(node: Namespace) -> None:
    node.run("ip", "link", "add", "ou0", "type", "veth", "peer", "name", "ou0p")
    node.run("ip", "link", "set", "ou0", "up")
    node.run("ip", "addr", "add", "10.99.0.2/24", "dev", "ou0")
    node.run("ip", "route", "add", str(C), "via", "10.99.0.9")  # an administrator's
    with node.entered(), rtnl() as kernel:
        oif = _index(kernel, "ou0")
        first = {A: _route(A, "10.99.0.11", oif), B: _route(B, "10.99.0.12", oif)}
        changes = owned_routes.update(kernel, {}, first)
        assert owned_routes.current(kernel) == first and len(changes) == 2
        # A moves to another node, B leaves, C (someone else's destination) is wanted.
        second = {A: _route(A, "10.99.0.21", oif), C: _route(C, "10.99.0.13", oif)}
        changes = owned_routes.update(kernel, first, second)
        assert owned_routes.current(kernel) == {A: second[A]}
        assert any("not ours" in c for c in changes)
        foreign = {str(r.dst): r.text for r in owned_routes.foreign(kernel)}
        assert "via 10.99.0.9" in foreign[str(C)]  # untouched
        # Nothing differs: nothing is asked of the kernel.
        assert owned_routes.update(kernel, second, second) == []
        # What it believed it owned is gone meanwhile: the next update still gets there.
        node.run("ip", "route", "del", str(A))
        assert owned_routes.update(kernel, {A: second[A]}, {B: first[B]})
        assert owned_routes.current(kernel) == {B: first[B]}


def test_default_oif_is_the_main_tables_default_route(node: Namespace) -> None:
    node.run("ip", "link", "add", "ou1", "type", "veth", "peer", "name", "ou1p")
    node.run("ip", "link", "set", "ou1", "up")
    node.run("ip", "addr", "add", "10.98.0.2/24", "dev", "ou1")
    node.run("ip", "addr", "add", "fd98::2/64", "dev", "ou1", "nodad")
    with node.entered(), rtnl() as kernel:
        index = _index(kernel, "ou1")
        assert owned_routes.default_oif(kernel) == 0
        node.run("ip", "route", "add", "default", "via", "10.98.0.1", "table", "100")
        assert owned_routes.default_oif(kernel) == 0  # not the main table's
        node.run("ip", "route", "add", "default", "via", "10.98.0.1")
        node.run("ip", "-6", "route", "add", "default", "via", "fd98::1")
        assert owned_routes.default_oif(kernel) == index
        assert owned_routes.default_oif(kernel, owned_routes.AF_INET6) == index


def test_kernel_changes_count_addresses_and_foreign_routes_only(node: Namespace) -> None:
    node.run("ip", "link", "add", "ou2", "type", "veth", "peer", "name", "ou2p")
    node.run("ip", "link", "set", "ou2", "up")
    with node.entered(), KernelChanges(owned_routes.PROTO_PYCNI) as changes, rtnl() as kernel:
        assert not changes.changed()
        node.run("ip", "addr", "add", "10.97.0.2/24", "dev", "ou2")
        assert changes.changed()  # the address and its prefix route
        assert not changes.changed()  # read: nothing new since
        oif = _index(kernel, "ou2")
        ours = _route(A, "10.97.0.11", oif)
        assert owned_routes.update(kernel, {}, {A: ours})
        assert not changes.changed()  # our own route: not a change of the node's facts
        node.run("ip", "route", "add", str(B), "via", "10.97.0.9")
        assert changes.changed()
        owned_routes.update(kernel, {A: ours}, {})
        assert not changes.changed()
        node.run("ip", "route", "del", str(B))
        assert changes.changed()
