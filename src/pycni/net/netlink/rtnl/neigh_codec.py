"""Neighbour and FDB messages (rtnetlink's ndmsg family) to and from the Kernel's records.

One header (struct ndmsg, include/uapi/linux/neighbour.h) serves both: ARP/NDP entries in
the AF_INET/AF_INET6 families, forwarding entries of a device (a VXLAN's remote VTEPs, the
cluster agent's) in AF_BRIDGE. The requests carry what iproute2's ``ip neigh`` and
``bridge fdb`` send for the same commands, attribute for attribute.
"""

from __future__ import annotations

import struct

from pycni.net.netlink.kernel import NUD_PERMANENT, FdbEntry, IPAddress, Neighbour, family_of
from pycni.net.netlink.rtnl.codec import ip_of, mac_bytes, mac_text
from pycni.net.netlink.rtnl.wire import attr, attr_u32, parse_attrs

RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
NDA_DST, NDA_LLADDR, NDA_IFINDEX = 1, 2, 8
NUD_NOARP = 0x40
NTF_SELF = 0x02  # an entry of the device itself, not of a bridge above it
AF_BRIDGE = 7

NDMSG = struct.Struct("=BxxxiHBB")  # family, (pad), ifindex, state, flags, type


def _ndmsg(family: int, index: int = 0, state: int = 0, flags: int = 0) -> bytes:
    return NDMSG.pack(family, index, state, flags, 0)


def neighbour(index: int, address: IPAddress, mac: str = "") -> bytes:
    """RTM_NEWNEIGH (with ``mac``) or RTM_DELNEIGH body of a permanent ARP/NDP entry; a
    delete carries the state too, as ``ip neigh del`` does (the kernel ignores it)."""
    body = _ndmsg(family_of(address.version), index, NUD_PERMANENT) + attr(NDA_DST, address.packed)
    return body + attr(NDA_LLADDR, mac_bytes(mac)) if mac else body


def dump_neighbours(index: int, family: int) -> bytes:
    """RTM_GETNEIGH dump of one family, filtered to one link by the kernel (NDA_IFINDEX; a
    strict-checking socket must leave the header's ifindex 0)."""
    return _ndmsg(family) + attr_u32(NDA_IFINDEX, index)


def fdb(index: int, mac: str, remote: IPAddress, deleting: bool = False) -> bytes:
    """RTM_NEWNEIGH/RTM_DELNEIGH body of a permanent FDB entry of the device itself
    (NTF_SELF): ``mac`` reached through ``remote``. A delete says NOARP too, as ``bridge fdb
    del`` does."""
    state = NUD_PERMANENT | NUD_NOARP if deleting else NUD_PERMANENT
    return (
        _ndmsg(AF_BRIDGE, index, state, NTF_SELF)
        + attr(NDA_LLADDR, mac_bytes(mac))
        + attr(NDA_DST, remote.packed)
    )


def dump_fdb(index: int) -> bytes:
    """RTM_GETNEIGH dump of the AF_BRIDGE family: the header's ifindex asks the kernel for
    one device's entries (``bridge fdb show dev``)."""
    return _ndmsg(AF_BRIDGE, index)


def _header(payload: bytes) -> tuple[int, int, dict[int, bytes]]:
    """(ifindex, state, attributes) of one RTM_NEWNEIGH payload."""
    _family, index, state, _flags, _type = NDMSG.unpack_from(payload)
    return index, state, parse_attrs(payload, NDMSG.size, len(payload))


def decode_neighbour(payload: bytes) -> Neighbour | None:
    """An RTM_NEWNEIGH payload; None for an entry without an IP address or a MAC (an
    incomplete or failed resolution)."""
    index, state, raw = _header(payload)
    address, mac = ip_of(raw.get(NDA_DST)), mac_text(raw.get(NDA_LLADDR))
    if address is None or not mac:
        return None
    return Neighbour(index, address, mac, state)


def decode_fdb(payload: bytes) -> FdbEntry | None:
    """An AF_BRIDGE RTM_NEWNEIGH payload; None without a MAC."""
    index, _state, raw = _header(payload)
    mac = mac_text(raw.get(NDA_LLADDR))
    if not mac:
        return None
    return FdbEntry(index, mac, ip_of(raw.get(NDA_DST)))
