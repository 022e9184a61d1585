"""The fake node portmap's rootless logic tests start from (both backends' files)."""

from __future__ import annotations

import ipaddress

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD


def node_with_bridge() -> FakeHost:
    """The node as bridge leaves it: cni0 up with the pod network's gateway address."""
    host = FakeHost()
    host.add_pod(POD)
    node = host.kernel()
    node.add_bridge("cni0")
    cni0 = node.find_link("cni0")
    assert cni0 is not None
    node.set_link(cni0.index, up=True)
    node.add_address(cni0.index, ipaddress.ip_interface("10.22.0.1/16"))
    return host
