"""Linux bridges: create-or-reuse, enslave ports with their flags, gateway addresses on them."""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass
from typing import Any

from pycni.net import sysctl
from pycni.net.link import (
    IFF_PROMISC,
    IFF_UP,
    IPInterface,
    LinkNotFound,
    addresses,
    get,
    index_of,
    kind_of,
    mac_of,
)

# bridge VLAN flags (linux/if_bridge.h)
BRIDGE_VLAN_INFO_PVID = 0x2
BRIDGE_VLAN_INFO_UNTAGGED = 0x4


class NotABridge(Exception):
    pass


class AddressConflict(Exception):
    pass


class VlanFilteringUnsupported(Exception):
    """The kernel has no bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)."""


@dataclass
class BridgeInfo:
    index: int
    created: bool


def ensure_bridge(
    ipr: Any, name: str, mtu: int = 0, promisc: bool = False, vlan_filtering: bool = False
) -> BridgeInfo:
    """Create the bridge if missing (MTU and vlan_filtering apply only at creation, as the
    reference); then promisc if asked, accept_ra=0 and up. An existing bridge is reused."""
    spec: dict[str, Any] = {"ifname": name, "kind": "bridge"}
    if mtu:
        spec["mtu"] = mtu
    if vlan_filtering:
        spec["br_vlan_filtering"] = 1
    created = False
    try:  # the common case on a busy node: the bridge is there; one lookup, no failed add
        msg = get(ipr, name)
    except LinkNotFound:
        created = True
        try:
            ipr.link("add", **spec)
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code == errno.EEXIST:  # another ADD created it meanwhile
                created = False
            elif code == errno.EOPNOTSUPP and vlan_filtering:
                raise VlanFilteringUnsupported(str(exc)) from None
            else:
                raise RuntimeError(f'could not add "{name}": {exc}') from None
        msg = get(ipr, name)
    if kind_of(msg) != "bridge":
        raise NotABridge(f'"{name}" already exists but is not a bridge')
    index = int(msg["index"])
    flags = int(msg["flags"])
    if promisc and not flags & IFF_PROMISC:
        ipr.link("set", index=index, flags=IFF_PROMISC, change=IFF_PROMISC)
    sysctl.try_write(f"net/ipv6/conf/{name}/accept_ra", "0")
    if not flags & IFF_UP:
        ipr.link("set", index=index, state="up")
    return BridgeInfo(index, created)


def attach_port(
    ipr: Any, port_index: int, bridge_index: int, hairpin: bool, isolated: bool
) -> None:
    """Enslave the port, then set its hairpin and isolated flags.

    A new port starts with both flags off, so they are only written when one is wanted (the
    reference writes them even when off; the resulting state is the same, one call cheaper)."""
    ipr.link("set", index=port_index, master=bridge_index)
    if hairpin or isolated:
        ipr.brport("set", index=port_index, mode=int(hairpin), isolated=int(isolated))


def port_vlans(ipr: Any, port_index: int, vlan: int, trunk: list[int], preserve: bool) -> None:
    """The reference's VLAN setup of a port: drop the default VLAN unless preserved, the
    access VLAN as PVID+untagged, trunk VLANs tagged, native VLAN 1 for a trunk alone."""
    try:
        if not preserve:
            _drop_port_vlans(ipr, port_index)
        if vlan:
            flags = BRIDGE_VLAN_INFO_PVID | BRIDGE_VLAN_INFO_UNTAGGED
            ipr.vlan_filter("add", index=port_index, vlan_info={"vid": vlan, "flags": flags})
        for vid in trunk:
            ipr.vlan_filter("add", index=port_index, vlan_info={"vid": vid})
        if trunk and not vlan:
            flags = BRIDGE_VLAN_INFO_PVID | BRIDGE_VLAN_INFO_UNTAGGED
            ipr.vlan_filter("add", index=port_index, vlan_info={"vid": 1, "flags": flags})
    except Exception as exc:
        if getattr(exc, "code", None) == errno.EOPNOTSUPP:
            raise VlanFilteringUnsupported(str(exc)) from None
        raise


def _drop_port_vlans(ipr: Any, port_index: int) -> None:
    for msg in ipr.get_vlans(index=port_index) or []:
        spec = msg.get_attr("IFLA_AF_SPEC")
        if spec is None:
            continue
        for name, info in spec["attrs"]:
            if name == "IFLA_BRIDGE_VLAN_INFO":
                ipr.vlan_filter("del", index=port_index, vlan_info={"vid": info["vid"]})


def ensure_addr(ipr: Any, bridge_name: str, address: IPInterface, force: bool) -> bool:
    """Put ``address`` on the bridge (the reference's ensureAddr); True when we added it.

    An identical address is a no-op. Any other IPv4 address conflicts; an IPv6 one only when
    the prefixes overlap. A conflict is an error unless ``force``, which removes the old one.
    After adding, the bridge MAC is set to itself so it stops following its lowest port MAC.
    """
    index = index_of(ipr, bridge_name)
    for existing in addresses(ipr, index):
        if existing.version != address.version:
            continue
        if existing == address:
            return False
        overlaps = address.version == 4 or (
            existing.ip in address.network or address.ip in existing.network
        )
        if overlaps:
            if not force:
                raise AddressConflict(
                    f'"{bridge_name}" already has an IP address different from {address}'
                )
            ipr.addr(
                "del", index=index, address=str(existing.ip), prefixlen=existing.network.prefixlen
            )
    added = True
    try:
        ipr.addr("add", index=index, address=str(address.ip), prefixlen=address.network.prefixlen)
    except Exception as exc:
        if getattr(exc, "code", None) != errno.EEXIST:
            raise RuntimeError(f'could not add IP address to "{bridge_name}": {exc}') from None
        added = False
    msg = get(ipr, bridge_name)
    ipr.link("set", index=index, address=mac_of(msg))
    return added


def remove_addr(ipr: Any, bridge_name: str, address: IPInterface) -> None:
    try:
        index = index_of(ipr, bridge_name)
    except LinkNotFound:
        return
    try:
        ipr.addr("del", index=index, address=str(address.ip), prefixlen=address.network.prefixlen)
    except Exception as exc:
        if getattr(exc, "code", None) not in (errno.EADDRNOTAVAIL, errno.ENODEV):
            raise


def delete_if_unused(ipr: Any, name: str) -> None:
    """Remove a bridge we created if nothing is attached to it (ADD rollback)."""
    try:
        index = index_of(ipr, name)
    except LinkNotFound:
        return
    if any(int(m.get_attr("IFLA_MASTER") or 0) == index for m in ipr.get_links()):
        return
    ipr.link("del", index=index)


def network_address(address: IPInterface) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return address.network.network_address
