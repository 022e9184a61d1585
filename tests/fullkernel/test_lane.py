"""The lane itself: the guest has the modules the full-kernel tests need."""

from __future__ import annotations

import pytest

from tests import harness

KINDS = {
    "dummy": ("type", "dummy"),
    "vrf": ("type", "vrf", "table", "100"),
    "wireguard": ("type", "wireguard"),
    "ipip": ("type", "ipip", "remote", "192.0.2.1"),
}


@pytest.mark.kernel
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_link_kind_exists(node: harness.Namespace, kind: str) -> None:
    node.run("ip", "link", "add", "k0", *KINDS[kind])
    links = node.links()
    assert links["k0"]["linkinfo"]["info_kind"] == kind  # type: ignore[index]


@pytest.mark.kernel
@pytest.mark.parametrize("kind", ["vlan", "ipvlan"])
def test_stacked_kind_exists(node: harness.Namespace, kind: str) -> None:
    node.run("ip", "link", "add", "p0", "type", "dummy")
    extra = ("id", "7") if kind == "vlan" else ("mode", "l2")
    node.run("ip", "link", "add", "link", "p0", "s0", "type", kind, *extra)
    assert node.links()["s0"]["linkinfo"]["info_kind"] == kind  # type: ignore[index]


@pytest.mark.kernel
def test_bridge_vlan_filtering(node: harness.Namespace) -> None:
    node.run("ip", "link", "add", "br0", "type", "bridge", "vlan_filtering", "1")
    node.run("bridge", "vlan", "add", "dev", "br0", "vid", "42", "self")
    out = node.run("bridge", "-j", "vlan", "show", "dev", "br0").stdout
    assert '"vlan":42' in out.replace(" ", "")
