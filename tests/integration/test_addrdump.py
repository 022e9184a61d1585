"""The kernel-filtered address dump of the native client agrees with iproute2."""

from __future__ import annotations

import ipaddress

import pytest

from pycni.net.link import addresses, index_of
from pycni.net.netlink.rtnl.native import NativeKernel
from tests import harness


@pytest.mark.kernel
def test_addresses_of_one_link_only(node: harness.Namespace) -> None:
    node.run("ip", "link", "add", "name", "a0", "type", "veth", "peer", "name", "b0")
    node.run("ip", "addr", "add", "10.1.2.3/24", "dev", "a0")
    node.run("ip", "addr", "add", "fd00::5/64", "dev", "a0")
    node.run("ip", "addr", "add", "10.9.9.9/24", "dev", "b0")
    with node.entered():
        kernel = NativeKernel()
    try:
        idx = index_of(kernel, "a0")
        found = addresses(kernel, idx)
    finally:
        kernel.close()
    assert found == [
        ipaddress.ip_interface("10.1.2.3/24"),
        ipaddress.ip_interface("fd00::5/64"),
    ]
