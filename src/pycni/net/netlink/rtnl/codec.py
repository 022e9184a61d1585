"""rtnetlink messages to and from pycni.net.netlink.kernel's dataclasses, on byte strings.

Decoders take one message payload (after the netlink header) and return the record, or
None for a reply pycni cannot use (another family, no address). Encoders return the body
of one request; the caller frames and sends it (wire.Socket.request).
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (benchmarks.md)
import ipaddress
import struct

from pycni.net.netlink.kernel import (
    IFF_UP,
    MAIN_TABLE,
    RTN_UNICAST,
    RTPROT_STATIC,
    Address,
    IPAddress,
    IPInterface,
    Link,
    Route,
    Rule,
    VxlanInfo,
)
from pycni.net.netlink.rtnl.wire import (
    NLA_TYPE_MASK,
    RTATTR,
    align,
    attr,
    attr_str,
    attr_u32,
    nested,
    parse_attrs,
)
from pycni.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Unpack

    from pycni.net.netlink.kernel import LinkChanges

IFINFOMSG = struct.Struct("=BxHiII")
IFADDRMSG = struct.Struct("=BBBBI")
RTMSG = struct.Struct("=BBBBBBBBI")
RTNEXTHOP = struct.Struct("=HBBi")
_U32 = struct.Struct("=I")
_U16 = struct.Struct("=H")
BRIDGE_VLAN_INFO = struct.Struct("=HH")  # struct bridge_vlan_info: flags, vid
_S32 = struct.Struct("=i")
_BE16 = struct.Struct("!H")

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_SETLINK = 16, 17, 18, 19
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWRULE, RTM_DELRULE, RTM_GETRULE = 32, 33, 34
FRA_SRC, FRA_PRIORITY, FRA_TABLE = 2, 6, 15
FR_ACT_TO_TBL = 1
RTM_NEWNETCONF, RTM_GETNETCONF = 80, 82
RTM_NEWNSID, RTM_GETNSID = 88, 90
NETNSA_NSID, NETNSA_FD = 1, 3
RTGENMSG = struct.Struct("=Bxxx")  # struct rtgenmsg, padded to 4 as the kernel parses it

IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_TXQLEN, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_IFALIAS = 13, 16, 18, 20
IFLA_NET_NS_FD, IFLA_EXT_MASK, IFLA_PROMISCUITY, IFLA_LINK_NETNSID = 28, 29, 30, 37
IFLA_AF_SPEC, IFLA_INET_CONF = 26, 1
NETCONFA_IFINDEX, NETCONFA_FORWARDING, NETCONFA_IFINDEX_ALL = 1, 2, -1
NETCONFMSG = struct.Struct("=Bxxx")  # struct netconfmsg, padded to 4 as the kernel parses it
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFLA_MACVLAN_MODE = 1
IFLA_MACVLAN_BC_QUEUE_LEN = 7
IFLA_IPVLAN_MODE, IFLA_IPVLAN_FLAGS = 1, 2  # u16 each (include/uapi/linux/if_link.h)
IFLA_VLAN_ID = 1  # u16
IFLA_BR_VLAN_FILTERING = 7  # u8, in a bridge's IFLA_INFO_DATA
IFLA_VRF_TABLE = 1
AF_BRIDGE, IFLA_PROTINFO, IFLA_BRPORT_MODE, IFLA_BRPORT_ISOLATED = 7, 12, 4, 33
# IFLA_AF_SPEC of an AF_BRIDGE message (include/uapi/linux/if_bridge.h)
IFLA_BRIDGE_FLAGS, IFLA_BRIDGE_VLAN_INFO = 0, 2
BRIDGE_FLAGS_MASTER = 1  # the request is for the bridge the port belongs to, not the port
RTEXT_FILTER_BRVLAN = 1 << 1  # a dump lists every VLAN of each port, one entry per vid
IFLA_VXLAN_ID, IFLA_VXLAN_LINK, IFLA_VXLAN_LOCAL, IFLA_VXLAN_LEARNING = 1, 3, 4, 7
IFLA_VXLAN_PORT, IFLA_VXLAN_LOCAL6 = 15, 17
RTEXT_FILTER_SKIP_STATS = 1 << 3
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST, IFA_FLAGS = 1, 2, 4, 8
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC = 1, 4, 5, 6, 7
RTA_METRICS, RTA_MULTIPATH, RTA_TABLE = 8, 9, 15
RTAX_MTU = 2
RT_TABLE_COMPAT = 252

OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")

EXT_MASK = attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)


# ------------------------------------------------------------------ small decoders


def _u32(raw: bytes | None, default: int = 0) -> int:
    return default if raw is None or len(raw) < 4 else int(_U32.unpack_from(raw)[0])


def _u16(raw: bytes | None) -> int | None:
    return None if raw is None or len(raw) < 2 else int(_U16.unpack_from(raw)[0])


def _s32(raw: bytes | None) -> int | None:
    return None if raw is None or len(raw) < 4 else int(_S32.unpack_from(raw)[0])


def _str(raw: bytes | None) -> str:
    return "" if raw is None else raw.split(b"\0", 1)[0].decode(errors="replace")


def mac_text(raw: bytes | None) -> str:
    # bytes.hex's separator: the same text as joining "%02x" per byte, 2 -> 0.1 us a link
    return "" if raw is None else raw.hex(":")


def mac_bytes(text: str) -> bytes:
    """``aa:bb:…`` as bytes; ValueError for anything else."""
    parts = text.split(":")
    if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
        raise ValueError(f"not a MAC address: {text!r}")
    return bytes(int(part, 16) for part in parts)


def ip_of(raw: bytes | None) -> IPAddress | None:
    if raw is None or len(raw) not in (4, 16):
        return None
    return ipaddress.ip_address(raw)


def packed(address: IPAddress) -> tuple[int, bytes]:
    """(family, bytes) of an address."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return family, address.packed


# ------------------------------------------------------------------ replies


@record(frozen=True)
class _Info:
    """What IFLA_LINKINFO says about the kinds pycni makes (Link's fields of the same name)."""

    kind: str = ""
    macvlan_mode: int | None = None
    vxlan: VxlanInfo | None = None
    ipvlan_mode: int | None = None
    ipvlan_flags: int = 0
    vlan_id: int | None = None
    vrf_table: int | None = None


_NO_INFO = _Info()
_DATA_KINDS = frozenset(("macvlan", "ipvlan", "vlan", "vrf", "vxlan"))  # _Info reads their data


def _linkinfo(raw: bytes | None) -> _Info:
    if raw is None:
        return _NO_INFO
    info = parse_attrs(raw, 0, len(raw))
    kind = _str(info.get(IFLA_INFO_KIND))
    data_raw = info.get(IFLA_INFO_DATA)
    if data_raw is None or kind not in _DATA_KINDS:
        # a bridge's IFLA_INFO_DATA holds ~45 attributes nothing here reads: parsing them
        # took a third of decoding a bridge's link message (45 -> 28 us measured)
        return _Info(kind)
    data = parse_attrs(data_raw, 0, len(data_raw))
    if kind == "macvlan":
        mode = data.get(IFLA_MACVLAN_MODE)
        return _Info(kind, macvlan_mode=None if mode is None else _u32(mode))
    if kind == "ipvlan":
        flags = _u16(data.get(IFLA_IPVLAN_FLAGS)) or 0
        return _Info(kind, ipvlan_mode=_u16(data.get(IFLA_IPVLAN_MODE)), ipvlan_flags=flags)
    if kind == "vlan":
        return _Info(kind, vlan_id=_u16(data.get(IFLA_VLAN_ID)))
    if kind == "vrf":
        table = data.get(IFLA_VRF_TABLE)
        return _Info(kind, vrf_table=None if table is None else _u32(table))
    if kind == "vxlan":
        vni = data.get(IFLA_VXLAN_ID)
        port = data.get(IFLA_VXLAN_PORT)
        learning = data.get(IFLA_VXLAN_LEARNING)
        vxlan = VxlanInfo(
            vni=None if vni is None else _u32(vni),
            local=ip_of(data.get(IFLA_VXLAN_LOCAL)) or ip_of(data.get(IFLA_VXLAN_LOCAL6)),
            underlay_index=_u32(data.get(IFLA_VXLAN_LINK)),
            port=int(_BE16.unpack_from(port)[0]) if port and len(port) >= 2 else 0,
            learning=bool(learning and learning[0]),
        )
        return _Info(kind, vxlan=vxlan)
    return _Info(kind)


def decode_link(payload: bytes) -> Link:
    """An RTM_NEWLINK payload."""
    _family, _type, index, flags, _change = IFINFOMSG.unpack_from(payload, 0)
    raw = parse_attrs(payload, IFINFOMSG.size, len(payload))
    state = raw.get(IFLA_OPERSTATE)
    if state is None:
        oper = "unknown"
    else:
        oper = OPERSTATES[state[0]] if state[0] < len(OPERSTATES) else str(state[0])
    info = _linkinfo(raw.get(IFLA_LINKINFO))
    return Link(
        index=index,
        name=_str(raw.get(IFLA_IFNAME)),
        flags=flags,
        mac=mac_text(raw.get(IFLA_ADDRESS)),
        mtu=_u32(raw.get(IFLA_MTU)),
        master=_u32(raw.get(IFLA_MASTER)),
        peer_index=_u32(raw.get(IFLA_LINK)),
        peer_netnsid=_s32(raw.get(IFLA_LINK_NETNSID)),
        kind=info.kind,
        oper_state=oper,
        alias=_str(raw.get(IFLA_IFALIAS)),
        txqlen=_u32(raw.get(IFLA_TXQLEN)),
        promiscuity=_u32(raw.get(IFLA_PROMISCUITY)),
        macvlan_mode=info.macvlan_mode,
        vxlan=info.vxlan,
        ipvlan_mode=info.ipvlan_mode,
        ipvlan_flags=info.ipvlan_flags,
        vlan_id=info.vlan_id,
        vrf_table=info.vrf_table,
    )


def decode_address(payload: bytes) -> Address | None:
    """An RTM_NEWADDR payload; None without an IPv4/IPv6 address."""
    family, prefixlen, flags, scope, index = IFADDRMSG.unpack_from(payload, 0)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    raw = parse_attrs(payload, IFADDRMSG.size, len(payload))
    packed_ip = raw.get(IFA_ADDRESS) or raw.get(IFA_LOCAL)
    size = 0 if packed_ip is None else len(packed_ip)
    interface: IPInterface
    # from the packed bytes, not from "ip/len" text: ip_interface's parsing was most of this
    # decoder (24 -> 6 us); a prefix too long for the family still takes the text path,
    # for its error
    if size == 4 and prefixlen <= 32:
        interface = ipaddress.IPv4Interface((packed_ip, prefixlen))
    elif size == 16 and prefixlen <= 128:
        interface = ipaddress.IPv6Interface((packed_ip, prefixlen))
    else:
        ip = ip_of(packed_ip)
        if ip is None:
            return None
        interface = ipaddress.ip_interface(f"{ip}/{prefixlen}")
    return Address(index, interface, _u32(raw.get(IFA_FLAGS)) or flags, scope)


def _multipath_oifs(raw: bytes | None) -> tuple[int, ...]:
    if raw is None:
        return ()
    out = []
    pos = 0
    while pos + RTNEXTHOP.size <= len(raw):
        length, _flags, _hops, ifindex = RTNEXTHOP.unpack_from(raw, pos)
        if length < RTNEXTHOP.size:
            break
        out.append(ifindex)
        pos += (length + 3) & ~3
    return tuple(out)


def decode_route(payload: bytes) -> Route | None:
    """An RTM_NEWROUTE payload; None for a family other than IPv4/IPv6."""
    family, dst_len, _src, _tos, table, proto, scope, kind, flags = RTMSG.unpack_from(payload, 0)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    raw = parse_attrs(payload, RTMSG.size, len(payload))
    dst = ip_of(raw.get(RTA_DST))
    if dst is None:
        dst = ipaddress.ip_address("::" if family == socket.AF_INET6 else "0.0.0.0")
    priority = raw.get(RTA_PRIORITY)
    mtu = 0
    metrics = raw.get(RTA_METRICS)
    if metrics is not None:
        mtu = _u32(parse_attrs(metrics, 0, len(metrics)).get(RTAX_MTU))
    return Route(
        dst=ipaddress.ip_network(f"{dst}/{dst_len}", strict=False),
        oif=_u32(raw.get(RTA_OIF)),
        gateway=ip_of(raw.get(RTA_GATEWAY)),
        table=_u32(raw.get(RTA_TABLE)) or table,
        proto=proto,
        scope=scope,
        type=kind,
        flags=flags,
        priority=None if priority is None else _u32(priority),
        prefsrc=ip_of(raw.get(RTA_PREFSRC)),
        mtu=mtu,
        multipath_oifs=_multipath_oifs(raw.get(RTA_MULTIPATH)),
    )


# ------------------------------------------------------------------ requests


def ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, flags, change)


def get_link(index: int = 0, name: str = "") -> bytes:
    """RTM_GETLINK by index or by name, without statistics."""
    return ifinfo(index) + EXT_MASK + (attr_str(IFLA_IFNAME, name) if name else b"")


def _common(name: str = "", mtu: int = 0, mac: str = "", txqlen: int | None = None) -> bytes:
    out = b""
    if name:
        out += attr_str(IFLA_IFNAME, name)
    if mtu:
        out += attr_u32(IFLA_MTU, mtu)
    if mac:
        out += attr(IFLA_ADDRESS, mac_bytes(mac))
    if txqlen is not None:
        out += attr_u32(IFLA_TXQLEN, txqlen)
    return out


def new_link(
    kind: str, name: str, mtu: int = 0, txqlen: int | None = None, info_data: bytes = b""
) -> bytes:
    """RTM_NEWLINK (create) of a link of ``kind``."""
    info = [attr_str(IFLA_INFO_KIND, kind)]
    if info_data:
        info.append(info_data)
    return ifinfo() + _common(name, mtu, txqlen=txqlen) + nested(IFLA_LINKINFO, info)


def new_vrf(name: str, table: int) -> bytes:
    """RTM_NEWLINK (create) of a VRF device bound to routing table ``table``."""
    return new_link(
        "vrf", name, info_data=nested(IFLA_INFO_DATA, [attr_u32(IFLA_VRF_TABLE, table)])
    )


def new_vxlan(
    name: str, vni: int, local: IPAddress, underlay_index: int, port: int, mtu: int, learning: bool
) -> bytes:
    """RTM_NEWLINK (create) of a VXLAN device: its VNI, local VTEP address (IFLA_VXLAN_LOCAL
    or, for IPv6, IFLA_VXLAN_LOCAL6), underlay link, UDP port (network order) and learning,
    the attributes the cluster agent's flannel.N devices are compared on (VxlanInfo)."""
    local_kind = IFLA_VXLAN_LOCAL6 if local.version == 6 else IFLA_VXLAN_LOCAL
    data = [
        attr_u32(IFLA_VXLAN_ID, vni),
        attr(local_kind, local.packed),
        attr_u32(IFLA_VXLAN_LINK, underlay_index),
        attr(IFLA_VXLAN_PORT, _BE16.pack(port)),
        attr(IFLA_VXLAN_LEARNING, bytes([int(learning)])),
    ]
    return new_link("vxlan", name, mtu, info_data=nested(IFLA_INFO_DATA, data))


def new_macvlan(
    name: str,
    master: int,
    mode: int,
    netns_fd: int,
    mtu: int = 0,
    mac: str = "",
    bc_queue_len: int = 0,
) -> bytes:
    """RTM_NEWLINK (create) of a macvlan on ``master``, created straight in ``netns_fd``; the
    broadcast queue length is sent only when set (as the reference's netlink library)."""
    data = [attr_u32(IFLA_MACVLAN_MODE, mode)]
    if bc_queue_len:
        data.append(attr_u32(IFLA_MACVLAN_BC_QUEUE_LEN, bc_queue_len))
    info = [attr_str(IFLA_INFO_KIND, "macvlan"), nested(IFLA_INFO_DATA, data)]
    return (
        ifinfo()
        + _common(name, mtu, mac)
        + attr_u32(IFLA_LINK, master)
        + attr_u32(IFLA_NET_NS_FD, netns_fd)
        + nested(IFLA_LINKINFO, info)
    )


def new_bridge(name: str, mtu: int = 0, vlan_filtering: bool = False) -> bytes:
    """RTM_NEWLINK (create) of a bridge, with VLAN filtering on when asked
    (IFLA_BR_VLAN_FILTERING, as ``ip link add NAME type bridge vlan_filtering 1``)."""
    data = b""
    if vlan_filtering:
        data = nested(IFLA_INFO_DATA, [attr(IFLA_BR_VLAN_FILTERING, b"\x01")])
    return new_link("bridge", name, mtu, info_data=data)


def _sub_link(kind: str, name: str, master: int, netns_fd: int, mtu: int, data: bytes) -> bytes:
    """RTM_NEWLINK (create) of a link stacked on ``master``, created in ``netns_fd``. No tx
    queue length: the kernel's default, as the reference since 1.6 (1.1.1 sent 0 by accident,
    which leaves a FIFO qdisc put on the link without a limit)."""
    info = [attr_str(IFLA_INFO_KIND, kind), nested(IFLA_INFO_DATA, [data])]
    return (
        ifinfo()
        + _common(name, mtu)
        + attr_u32(IFLA_LINK, master)
        + attr_u32(IFLA_NET_NS_FD, netns_fd)
        + nested(IFLA_LINKINFO, info)
    )


def new_ipvlan(name: str, master: int, mode: int, flags: int, netns_fd: int, mtu: int = 0) -> bytes:
    """An ipvlan of ``master``: IFLA_IPVLAN_MODE (0 l2, 1 l3, 2 l3s) and IFLA_IPVLAN_FLAGS
    (0 bridge, 1 private, 2 vepa), both u16, both always sent."""
    data = attr(IFLA_IPVLAN_MODE, _U16.pack(mode)) + attr(IFLA_IPVLAN_FLAGS, _U16.pack(flags))
    return _sub_link("ipvlan", name, master, netns_fd, mtu, data)


def new_vlan(name: str, master: int, vlan_id: int, netns_fd: int, mtu: int = 0) -> bytes:
    """An 802.1Q link of ``master`` (IFLA_VLAN_ID; the protocol left to the kernel's 802.1Q)."""
    return _sub_link("vlan", name, master, netns_fd, mtu, attr(IFLA_VLAN_ID, _U16.pack(vlan_id)))


def new_veth(
    name: str,
    peer_name: str,
    peer_netns_fd: int,
    mtu: int = 0,
    peer_mac: str = "",
    master: int = 0,
    txqlen: int | None = None,
) -> bytes:
    """RTM_NEWLINK (create) of a veth pair; with ``master`` the new end is enslaved in the
    same request (the kernel's rtnl_newlink_create does it before any flag change). ``txqlen``
    is the new end's (None: the kernel's default); the peer always gets the kernel's."""
    peer = ifinfo() + _common(peer_name, mtu, peer_mac) + attr_u32(IFLA_NET_NS_FD, peer_netns_fd)
    data = nested(IFLA_INFO_DATA, [attr(VETH_INFO_PEER, peer)])
    body = new_link("veth", name, mtu, txqlen=txqlen, info_data=data)
    return body + attr_u32(IFLA_MASTER, master) if master else body


def set_link(index: int, **changes: Unpack[LinkChanges]) -> bytes:
    """RTM_NEWLINK changing an existing link."""
    change = changes.get("flag_mask", 0)
    flags = changes.get("flags", 0) & change
    up = changes.get("up")
    if up is not None:
        change |= IFF_UP
        flags = flags | IFF_UP if up else flags & ~IFF_UP
    common = _common(
        changes.get("name") or "",
        changes.get("mtu") or 0,
        changes.get("mac") or "",
        changes.get("txqlen"),
    )
    body = ifinfo(index, flags, change) + common
    master, netns_fd, alias = changes.get("master"), changes.get("netns_fd"), changes.get("alias")
    if master is not None:
        body += attr_u32(IFLA_MASTER, master)
    if netns_fd is not None:
        body += attr_u32(IFLA_NET_NS_FD, netns_fd)
    if alias is not None:
        body += attr_str(IFLA_IFALIAS, alias)
    return body


def set_ipv4_conf(index: int, values: dict[int, int]) -> bytes:
    """RTM_NEWLINK setting IPv4 per-device settings: IFLA_AF_SPEC > AF_INET > IFLA_INET_CONF,
    one u32 attribute per IPV4_DEVCONF_* id (the kernel's inet_set_link_af)."""
    conf = nested(IFLA_INET_CONF, [attr_u32(key, value) for key, value in values.items()])
    spec = nested(IFLA_AF_SPEC, [nested(socket.AF_INET, [conf])])
    return ifinfo(index) + spec


def get_netconf(family: int) -> bytes:
    """RTM_GETNETCONF of the namespace-wide ("all") settings of a family."""
    return NETCONFMSG.pack(family) + attr(NETCONFA_IFINDEX, _S32.pack(NETCONFA_IFINDEX_ALL))


def decode_forwarding(payload: bytes) -> int | None:
    """NETCONFA_FORWARDING of an RTM_NEWNETCONF reply (None when absent)."""
    raw = parse_attrs(payload, NETCONFMSG.size, len(payload))
    return _s32(raw.get(NETCONFA_FORWARDING))


def bridge_port(index: int, hairpin: bool, isolated: bool) -> bytes:
    """A bridge port's hairpin and isolated flags (``bridge link set``: RTM_SETLINK in the
    AF_BRIDGE family, the flags nested in IFLA_PROTINFO, which the kernel reads as port
    settings only when marked nested)."""
    flags = (
        attr(IFLA_BRPORT_MODE, bytes([int(hairpin)])),
        attr(IFLA_BRPORT_ISOLATED, bytes([int(isolated)])),
    )
    return IFINFOMSG.pack(AF_BRIDGE, 0, index, 0, 0) + nested(IFLA_PROTINFO, flags)


def port_vlan(index: int, vid: int, flags: int = 0) -> bytes:
    """One VLAN of a bridge port, for RTM_SETLINK (add) or RTM_DELLINK (remove) in the
    AF_BRIDGE family: IFLA_AF_SPEC holding IFLA_BRIDGE_FLAGS = BRIDGE_FLAGS_MASTER (the
    bridge's VLAN table, as ``bridge vlan add ... master``) and one bridge_vlan_info."""
    if not 1 <= vid <= 4094:
        raise ValueError(f"VLAN id {vid} is not in 1..4094")
    spec = nested(
        IFLA_AF_SPEC,
        [
            attr(IFLA_BRIDGE_FLAGS, _U16.pack(BRIDGE_FLAGS_MASTER)),
            attr(IFLA_BRIDGE_VLAN_INFO, BRIDGE_VLAN_INFO.pack(flags, vid)),
        ],
    )
    return IFINFOMSG.pack(AF_BRIDGE, 0, index, 0, 0) + spec


def dump_bridge_vlans() -> bytes:
    """RTM_GETLINK dump of the AF_BRIDGE family with every port's VLANs (``bridge vlan show``;
    the kernel refuses an index filter for this dump, so the caller filters)."""
    return IFINFOMSG.pack(AF_BRIDGE, 0, 0, 0, 0) + attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_BRVLAN)


def decode_bridge_vlans(payload: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(port index, [(vid, flags), ...]) of one AF_BRIDGE RTM_NEWLINK reply."""
    _family, _type, index, _flags, _change = IFINFOMSG.unpack_from(payload, 0)
    spec = parse_attrs(payload, IFINFOMSG.size, len(payload)).get(IFLA_AF_SPEC)
    out: list[tuple[int, int]] = []
    if spec is None:
        return index, out
    pos = 0
    while pos + RTATTR.size <= len(spec):
        length, kind = RTATTR.unpack_from(spec, pos)
        if length < RTATTR.size:
            break
        body = spec[pos + RTATTR.size : pos + length]
        if kind & NLA_TYPE_MASK == IFLA_BRIDGE_VLAN_INFO and len(body) >= BRIDGE_VLAN_INFO.size:
            flags, vid = BRIDGE_VLAN_INFO.unpack_from(body)
            out.append((vid, flags))
        pos += align(length)
    return index, out


def address(
    index: int, interface: IPInterface, flags: int = 0, broadcast: IPAddress | None = None
) -> bytes:
    """RTM_NEWADDR/RTM_DELADDR body (IPv4 carries IFA_LOCAL too, as iproute2); ``flags``
    (IFA_F_*) in the header's byte and, whole, in IFA_FLAGS; ``broadcast`` in IFA_BROADCAST."""
    family, raw = packed(interface.ip)
    body = IFADDRMSG.pack(family, interface.network.prefixlen, flags & 0xFF, 0, index)
    if family == socket.AF_INET:
        body += attr(IFA_LOCAL, raw)
    body += attr(IFA_ADDRESS, raw)
    if broadcast is not None:
        body += attr(IFA_BROADCAST, broadcast.packed)
    return body + (attr_u32(IFA_FLAGS, flags) if flags else b"")


def dump_addresses(index: int = 0, family: int = 0) -> bytes:
    return IFADDRMSG.pack(family, 0, 0, 0, index)


def dump_routes(family: int, table: int = 0, oif: int = 0) -> bytes:
    """RTM_GETROUTE dump filtered by table and link (NETLINK_GET_STRICT_CHK)."""
    header = RTMSG.pack(family, 0, 0, 0, table if 0 < table < 256 else 0, 0, 0, 0, 0)
    attrs = b""
    if table:
        attrs += attr_u32(RTA_TABLE, table)
    if oif:
        attrs += attr_u32(RTA_OIF, oif)
    return header + attrs


def get_route(dst: IPAddress) -> bytes:
    family, raw = packed(dst)
    return RTMSG.pack(family, dst.max_prefixlen, 0, 0, 0, 0, 0, 0, 0) + attr(RTA_DST, raw)


def route(r: Route, deleting: bool) -> bytes:
    """RTM_NEWROUTE/RTM_DELROUTE body. As pyroute2: a new route defaults to proto static and
    type unicast; a delete leaves both 0 (any), so it matches the kernel's own routes."""
    family, raw = packed(r.dst.network_address)
    default_proto, default_type = (0, 0) if deleting else (RTPROT_STATIC, RTN_UNICAST)
    proto = default_proto if r.proto is None else r.proto
    kind = default_type if r.type is None else r.type
    table = r.table or MAIN_TABLE
    header = RTMSG.pack(
        family,
        r.dst.prefixlen,
        0,
        0,
        table if table < 256 else RT_TABLE_COMPAT,
        proto,
        r.scope or 0,
        kind,
        r.flags,
    )
    attrs = [attr_u32(RTA_TABLE, table)]
    if r.dst.prefixlen:
        attrs.append(attr(RTA_DST, raw))
    if r.oif:
        attrs.append(attr_u32(RTA_OIF, r.oif))
    if r.gateway is not None:
        if r.gateway.version != r.dst.version:
            raise ValueError(f"gateway {r.gateway} is not of the family of {r.dst}")
        attrs.append(attr(RTA_GATEWAY, r.gateway.packed))
    if r.priority:
        attrs.append(attr_u32(RTA_PRIORITY, r.priority))
    if r.prefsrc is not None:
        attrs.append(attr(RTA_PREFSRC, r.prefsrc.packed))
    if r.mtu:
        attrs.append(nested(RTA_METRICS, [attr_u32(RTAX_MTU, r.mtu)]))
    return header + b"".join(attrs)


# --- policy rules ----------------------------------------------------------------------------
# struct fib_rule_hdr has the layout of struct rtmsg: family, dst_len, src_len, tos, table,
# two reserved bytes, action, flags.


def rule(r: Rule) -> bytes:
    """RTM_NEWRULE/RTM_DELRULE body: ``from src lookup table`` at ``priority`` (iproute2's
    encoding: a table above 255 goes in FRA_TABLE, the header's byte says RT_TABLE_COMPAT)."""
    src_len = r.src.prefixlen if r.src is not None else 0
    header_table = r.table if r.table < 256 else RT_TABLE_COMPAT
    body = RTMSG.pack(r.family, 0, src_len, 0, header_table, 0, 0, FR_ACT_TO_TBL, 0)
    if r.src is not None:
        body += attr(FRA_SRC, packed(r.src.network_address)[1])
    if r.priority is not None:
        body += attr_u32(FRA_PRIORITY, r.priority)
    return body + attr_u32(FRA_TABLE, r.table)


def dump_rules(family: int) -> bytes:
    return RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)


def decode_rule(payload: bytes) -> Rule:
    family, _dst_len, src_len, _tos, table, _r1, _r2, _action, _flags = RTMSG.unpack_from(payload)
    raw = parse_attrs(payload, RTMSG.size, len(payload))
    src_ip = ip_of(raw.get(FRA_SRC))
    priority = raw.get(FRA_PRIORITY)
    return Rule(
        family=family,
        table=_u32(raw.get(FRA_TABLE)) or table,
        src=ipaddress.ip_network(f"{src_ip}/{src_len}", strict=False) if src_ip else None,
        priority=None if priority is None else _u32(priority),
    )


# --- namespace ids ---------------------------------------------------------------------------


def get_nsid(netns_fd: int) -> bytes:
    """RTM_GETNSID body: the id this namespace gives the one ``netns_fd`` refers to
    (``ip netns list-id``; the kernel allocates none by answering)."""
    return RTGENMSG.pack(socket.AF_UNSPEC) + attr_u32(NETNSA_FD, netns_fd)


def decode_nsid(payload: bytes) -> int | None:
    """NETNSA_NSID of an RTM_NEWNSID reply; None when absent or NETNSA_NSID_NOT_ASSIGNED
    (-1): the namespace has no id here."""
    value = _s32(parse_attrs(payload, RTGENMSG.size, len(payload)).get(NETNSA_NSID))
    return value if value is not None and value >= 0 else None
