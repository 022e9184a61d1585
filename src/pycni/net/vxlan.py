"""VXLAN devices: create one with given parameters, or keep the one that already matches.

The cluster agent owns one device per node (like flannel's ``flannel.1``). Learning is
off: the agent programs every remote VTEP itself (neighbor + FDB entries), so the kernel
never floods to find one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from pycni.net import link

DEFAULT_PORT = 8472  # the Linux default, also flannel's
OVERHEAD = 50  # outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14) headers
OVERHEAD_V6 = 70  # the same over an IPv6 underlay (40-byte outer header)


def overhead(underlay_version: int) -> int:
    """Bytes VXLAN adds to each packet over an underlay of that IP version."""
    return OVERHEAD_V6 if underlay_version == 6 else OVERHEAD


@dataclass(frozen=True)
class VxlanSpec:
    name: str
    vni: int
    local: ipaddress.IPv4Address | ipaddress.IPv6Address
    underlay_index: int
    mtu: int
    port: int = DEFAULT_PORT


def _matches(msg: Any, spec: VxlanSpec) -> bool:
    if link.kind_of(msg) != "vxlan":
        return False
    data = msg.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_DATA")
    if data is None:
        return False
    local = data.get_attr("IFLA_VXLAN_LOCAL6" if spec.local.version == 6 else "IFLA_VXLAN_LOCAL")
    return (
        int(data.get_attr("IFLA_VXLAN_ID") or -1) == spec.vni
        and local is not None
        and ipaddress.ip_address(local) == spec.local
        and int(data.get_attr("IFLA_VXLAN_LINK") or 0) == spec.underlay_index
        and int(data.get_attr("IFLA_VXLAN_PORT") or 0) == spec.port
        and not data.get_attr("IFLA_VXLAN_LEARNING")
    )


def ensure(ipr: Any, spec: VxlanSpec) -> tuple[int, str]:
    """The device as ``spec`` says, up; returns (index, MAC). A device of that name with
    other parameters is replaced; a matching one is kept (its MAC, so peers stay valid)."""
    found = ipr.link_lookup(ifname=spec.name)
    if found:
        msg = ipr.get_links(found[0])[0]
        if not _matches(msg, spec):
            ipr.link("del", index=found[0])
            found = []
    if not found:
        ipr.link(
            "add",
            ifname=spec.name,
            kind="vxlan",
            vxlan_id=spec.vni,
            **{"vxlan_local6" if spec.local.version == 6 else "vxlan_local": str(spec.local)},
            vxlan_link=spec.underlay_index,
            vxlan_port=spec.port,
            vxlan_learning=0,
            mtu=spec.mtu,
        )
    index = link.index_of(ipr, spec.name)
    msg = ipr.get_links(index)[0]
    if link.mtu_of(msg) != spec.mtu:
        ipr.link("set", index=index, mtu=spec.mtu)
    if not int(msg["flags"]) & link.IFF_UP:
        ipr.link("set", index=index, state="up")
    return index, link.mac_of(msg)


IFA_F_NODAD = 0x02


def ensure_address(
    ipr: Any, index: int, address: ipaddress.IPv4Interface | ipaddress.IPv6Interface
) -> None:
    """Exactly ``address`` of its family on the device (an old subnet's address is removed;
    IPv6 link-local addresses stay). An IPv6 address skips DAD: it is unique by lease."""
    present = link.addresses(ipr, index)
    for old in present:
        if old != address and old.version == address.version and not old.ip.is_link_local:
            ipr.addr("del", index=index, address=str(old.ip), prefixlen=old.network.prefixlen)
    if address not in present:
        extra = {"flags": IFA_F_NODAD} if address.version == 6 else {}
        ipr.addr(
            "add",
            index=index,
            address=str(address.ip),
            prefixlen=address.network.prefixlen,
            **extra,
        )
