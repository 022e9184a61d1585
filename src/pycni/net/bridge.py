"""Linux bridges: create-or-reuse, enslave ports with their flags, gateway addresses on them."""

from __future__ import annotations

import contextlib
import errno
import ipaddress

from pycni.net.errors import NetError
from pycni.net.link import LinkNotFound, get, index_of
from pycni.net.netlink.kernel import (
    IFF_PROMISC,
    IFF_UP,
    IPInterface,
    Kernel,
    NetlinkError,
    family_of,
)
from pycni.net.sysctl import Sysctl, try_write
from pycni.net.veth import create_pair
from pycni.record import record

# bridge VLAN flags (linux/if_bridge.h)
BRIDGE_VLAN_INFO_PVID = 0x2
BRIDGE_VLAN_INFO_UNTAGGED = 0x4


class NotABridge(NetError):
    pass


class AddressConflict(NetError):
    pass


class VlanFilteringUnsupported(NetError):
    """The kernel has no bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)."""


@record
class BridgeInfo:
    index: int
    created: bool
    mac: str = ""  # the bridge's MAC when this call found or made it (ensure_addr pins it)


def ensure_bridge(
    kernel: Kernel,
    sysctl: Sysctl,
    name: str,
    mtu: int = 0,
    promisc: bool = False,
    vlan_filtering: bool = False,
) -> BridgeInfo:
    """Create the bridge if missing (MTU and vlan_filtering apply only at creation, as the
    reference); then promisc if asked, accept_ra=0 and up. An existing bridge is reused."""
    created = False
    # the common case on a busy node: the bridge is there; one lookup, no failed add
    found = kernel.find_link(name)
    if found is None:
        created = True
        try:
            kernel.add_bridge(name, mtu, vlan_filtering)
        except NetlinkError as exc:
            if exc.exists:  # another ADD created it meanwhile
                created = False
            elif exc.not_supported and vlan_filtering:
                raise VlanFilteringUnsupported(str(exc)) from None
            else:
                raise RuntimeError(f'could not add "{name}": {exc}') from None
        found = get(kernel, name)
    if found.kind != "bridge":
        raise NotABridge(f'"{name}" already exists but is not a bridge')
    index = found.index
    if promisc and not found.flags & IFF_PROMISC:
        kernel.set_link(index, flags=IFF_PROMISC, flag_mask=IFF_PROMISC)
    try_write(sysctl, f"net/ipv6/conf/{name}/accept_ra", "0")
    if not found.flags & IFF_UP:
        kernel.set_link(index, up=True)
    return BridgeInfo(index, created, found.mac)


def set_port_flags(kernel: Kernel, port_index: int, hairpin: bool, isolated: bool) -> None:
    """A new port's hairpin and isolated flags (it is enslaved when its veth is created).

    A new port starts with both flags off, so they are only written when one is wanted (the
    reference writes them even when off; the resulting state is the same, one call cheaper)."""
    if hairpin or isolated:
        kernel.set_bridge_port(port_index, hairpin, isolated)


def port_vlans(
    kernel: Kernel, port_index: int, vlan: int, trunk: list[int], preserve: bool
) -> None:
    """The reference's VLAN setup of a port, in its order: drop every VLAN the port joined
    with (the bridge's default PVID) unless preserved, the access VLAN as PVID+untagged, trunk
    VLANs tagged (a trunk VLAN equal to ``vlan`` ends up tagged, as there), native VLAN 1 for a
    trunk alone."""
    try:
        if (vlan or trunk) and not preserve:
            for vid in kernel.port_vlans(port_index):
                kernel.delete_port_vlan(port_index, vid)
        if vlan:
            flags = BRIDGE_VLAN_INFO_PVID | BRIDGE_VLAN_INFO_UNTAGGED
            kernel.add_port_vlan(port_index, vlan, flags)
        for vid in trunk:
            kernel.add_port_vlan(port_index, vid)
        if trunk and not vlan:
            flags = BRIDGE_VLAN_INFO_PVID | BRIDGE_VLAN_INFO_UNTAGGED
            kernel.add_port_vlan(port_index, 1, flags)
    except NetlinkError as exc:
        if exc.not_supported:
            raise VlanFilteringUnsupported(str(exc)) from None
        raise


def vlan_gateway_name(bridge_name: str, vid: int) -> str:
    """The reference's gateway interface of VLAN ``vid`` on a bridge: ``<bridge>.<vid>``."""
    return f"{bridge_name}.{vid}"


@record
class VlanGateway:
    """The ``<bridge>.<vid>`` end of the gateway veth; ``created`` by this call."""

    name: str
    index: int
    mac: str
    created: bool


def ensure_vlan_gateway(
    kernel: Kernel,
    sysctl: Sysctl,
    node_fd: int,
    bridge_index: int,
    bridge_name: str,
    vid: int,
    preserve: bool,
    port_ipv6: bool = True,
) -> VlanGateway:
    """The interface that carries the gateway addresses of VLAN ``vid`` (the reference's
    ensureVlanInterface): a veth pair in the node namespace, one end named
    ``<bridge>.<vid>``, the other (``veth%08x``) a port of the bridge in ``vid`` (PVID,
    untagged), both up, the veth at the bridge's MTU. A link of that name is reused as is.
    ``port_ipv6`` as the pod ports' ``hostVethIPv6``: IPv6 on the port end (the reference's)
    or off; the ``<bridge>.<vid>`` end keeps IPv6, it may carry an IPv6 gateway. ``kernel``
    and ``sysctl`` are of the node namespace, ``node_fd`` a handle of it."""
    name = vlan_gateway_name(bridge_name, vid)
    found = kernel.find_link(name)
    if found is not None:
        return VlanGateway(name, found.index, found.mac, False)
    mtu = kernel.link(bridge_index).mtu
    pair = create_pair(kernel, sysctl, node_fd, name, mtu, master=bridge_index, host_ipv6=port_ipv6)
    try:
        port_vlans(kernel, pair.host_index, vid, [], preserve)
        gateway = get(kernel, name)
        kernel.set_link(gateway.index, up=True)
    except BaseException:
        with contextlib.suppress(NetlinkError):
            kernel.delete_link(pair.host_index)
        raise
    return VlanGateway(name, gateway.index, gateway.mac, True)


def ensure_addr(
    kernel: Kernel,
    bridge_name: str,
    address: IPInterface,
    force: bool,
    mac: str = "",
    index: int = 0,
) -> bool:
    """Put ``address`` on the bridge (the reference's ensureAddr); True when we added it.

    An identical address is a no-op. Any other IPv4 address conflicts; an IPv6 one only when
    the prefixes overlap. A conflict is an error unless ``force``, which removes the old one.
    After adding, the bridge MAC is pinned so it stops following its lowest port's: to
    ``mac``, the bridge's own from before its first port joined (BridgeInfo.mac), as the
    reference pins the MAC it read when it set the bridge up; else (none given, or the zero
    MAC a bridge has after its last port left: the kernel refuses it) to the current one.
    ``index``: the link's, when the caller has it (as the reference passes its link object);
    it spares an RTM_GETLINK by name on every ADD.
    """
    if not index:
        index = index_of(kernel, bridge_name)
    # one family's dump: the kernel answers it without the RTNL mutex, unlike a dump of every
    # family, which waits behind the kernel's per-pod work on a busy node (docs/benchmarks.md)
    for found in kernel.addresses(index=index, family=family_of(address.version)):
        existing = found.interface
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
            kernel.delete_address(index, existing)
    added = True
    try:
        kernel.add_address(index, address)
    except NetlinkError as exc:
        if not exc.exists:
            raise RuntimeError(f'could not add IP address to "{bridge_name}": {exc}') from None
        added = False
    if not _unicast(mac):
        mac = get(kernel, bridge_name).mac
    kernel.set_link(index, mac=mac)
    return added


def _unicast(mac: str) -> bool:
    """A MAC a link can take: not empty, not all zero, not multicast."""
    try:
        octets = bytes.fromhex(mac.replace(":", ""))
    except ValueError:
        return False
    return len(octets) == 6 and any(octets) and not octets[0] & 1


def remove_addr(kernel: Kernel, bridge_name: str, address: IPInterface) -> None:
    try:
        index = index_of(kernel, bridge_name)
    except LinkNotFound:
        return
    try:
        kernel.delete_address(index, address)
    except NetlinkError as exc:
        if exc.errno not in (errno.EADDRNOTAVAIL, errno.ENODEV):
            raise


def delete_if_unused(kernel: Kernel, name: str) -> None:
    """Remove a bridge we created if nothing is attached to it (ADD rollback)."""
    try:
        index = index_of(kernel, name)
    except LinkNotFound:
        return
    if any(other.master == index for other in kernel.links()):
        return
    kernel.delete_link(index)


def network_address(address: IPInterface) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return address.network.network_address
