"""The kernel-filtered address dump of both Kernel implementations agrees with iproute2."""

from __future__ import annotations

import ipaddress

import pytest

from pycni.net.link import addresses, index_of
from pycni.net.netlink.rtnl.native import NativeKernel
from pycni.net.netlink.rtnl.pyroute2_adapter import Pyroute2Kernel, socket_in_current_netns
from tests import harness


@pytest.mark.kernel
@pytest.mark.parametrize("kind", ["native", "pyroute2"])
def test_addresses_of_one_link_only(node: harness.Namespace, kind: str) -> None:
    node.run("ip", "link", "add", "name", "a0", "type", "veth", "peer", "name", "b0")
    node.run("ip", "addr", "add", "10.1.2.3/24", "dev", "a0")
    node.run("ip", "addr", "add", "fd00::5/64", "dev", "a0")
    node.run("ip", "addr", "add", "10.9.9.9/24", "dev", "b0")
    with node.entered():
        kernel = NativeKernel() if kind == "native" else Pyroute2Kernel.open()
        try:
            idx = index_of(kernel, "a0")
            assert socket_in_current_netns(kernel.fileno())
            found = addresses(kernel, idx)
        finally:
            kernel.close()
    assert found == [
        ipaddress.ip_interface("10.1.2.3/24"),
        ipaddress.ip_interface("fd00::5/64"),
    ]


@pytest.mark.kernel
def test_socket_of_another_namespace_is_detected(node: harness.Namespace) -> None:
    kernel = NativeKernel()
    try:
        with node.entered():
            assert not socket_in_current_netns(kernel.fileno())
        assert socket_in_current_netns(kernel.fileno())
    finally:
        kernel.close()
