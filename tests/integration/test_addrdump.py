"""The kernel-filtered address dump agrees with iproute2, in a private namespace."""

from __future__ import annotations

import ipaddress

import pytest

from pycni.net import addrdump
from pycni.net.link import addresses, index_of
from pycni.net.netlink import rtnl
from tests import harness


@pytest.mark.kernel
def test_addresses_of_one_link_only(node: harness.Namespace) -> None:
    node.run("ip", "link", "add", "name", "a0", "type", "veth", "peer", "name", "b0")
    node.run("ip", "addr", "add", "10.1.2.3/24", "dev", "a0")
    node.run("ip", "addr", "add", "fd00::5/64", "dev", "a0")
    node.run("ip", "addr", "add", "10.9.9.9/24", "dev", "b0")
    with node.entered(), rtnl() as ipr:
        idx = index_of(ipr, "a0")
        fast = addrdump.addresses(idx)
        assert addrdump.socket_in_current_netns(ipr.fileno())
        assert addresses(ipr, idx) == fast
    assert fast == [
        ipaddress.ip_interface("10.1.2.3/24"),
        ipaddress.ip_interface("fd00::5/64"),
    ]


@pytest.mark.kernel
def test_socket_of_another_namespace_is_detected(node: harness.Namespace) -> None:
    with rtnl() as ipr, node.entered():
        assert not addrdump.socket_in_current_netns(ipr.fileno())
