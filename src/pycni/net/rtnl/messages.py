"""Decoded rtnetlink messages that read like pyroute2's: ``msg["index"]``, ``msg.get_attr(…)``.

Attributes are decoded when asked for. Only the attributes named in the tables below are
known; asking for another one is a programming error (KeyError), so a caller that needs more
than this client decodes finds out in tests instead of silently reading None.
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (~2 ms a call)
import struct
from collections.abc import Callable
from typing import Any

from pycni.net.rtnl.wire import parse_attrs

Decoder = Callable[[bytes], Any]
Table = dict[str, tuple[int, Decoder]]

IFINFOMSG = struct.Struct("=BxHiII")
IFADDRMSG = struct.Struct("=BBBBI")
RTMSG = struct.Struct("=BBBBBBBBI")

RTM_NEWLINK = 16
RTM_NEWADDR = 20
RTM_NEWROUTE = 24

OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")


def _u8(raw: bytes) -> int:
    return raw[0]


def _u32(raw: bytes) -> int:
    return int(struct.unpack_from("=I", raw)[0])


def _s32(raw: bytes) -> int:
    return int(struct.unpack_from("=i", raw)[0])


def _be16(raw: bytes) -> int:
    return int(struct.unpack_from("!H", raw)[0])


def _str(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _ip(raw: bytes) -> str:
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    if len(raw) == 16:
        return socket.inet_ntop(socket.AF_INET6, raw)
    return raw.hex()


def _operstate(raw: bytes) -> str:
    return OPERSTATES[raw[0]] if raw[0] < len(OPERSTATES) else str(raw[0])


class Message:
    """One reply: header fields by name, attributes decoded through ``table``."""

    __slots__ = ("_fields", "_raw", "_table", "event")

    def __init__(self, event: str, fields: dict[str, int], raw: dict[int, bytes], table: Table):
        self.event = event
        self._fields = fields
        self._raw = raw
        self._table = table

    def get_attr(self, name: str, default: Any = None) -> Any:
        kind, decode = self._table[name]
        raw = self._raw.get(kind)
        return default if raw is None else decode(raw)

    @property
    def attrs(self) -> list[tuple[str, Any]]:
        """Every known attribute present, as (name, value)."""
        return [(n, self.get_attr(n)) for n, (k, _) in self._table.items() if k in self._raw]

    def __getitem__(self, key: str) -> Any:
        if key == "attrs":
            return self.attrs
        if key == "event":
            return self.event
        return self._fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return self.get_attr(key, default) if key in self._table else default

    def __repr__(self) -> str:
        return f"<{self.event} {self._fields} {self.attrs}>"


MACVLAN_DATA: Table = {"IFLA_MACVLAN_MODE": (1, _u32), "IFLA_MACVLAN_FLAGS": (2, _u32)}
VXLAN_DATA: Table = {
    "IFLA_VXLAN_ID": (1, _u32),
    "IFLA_VXLAN_GROUP": (2, _ip),
    "IFLA_VXLAN_LINK": (3, _u32),
    "IFLA_VXLAN_LOCAL": (4, _ip),
    "IFLA_VXLAN_TTL": (5, _u8),
    "IFLA_VXLAN_LEARNING": (7, _u8),
    "IFLA_VXLAN_PORT": (15, _be16),
    "IFLA_VXLAN_GROUP6": (16, _ip),
    "IFLA_VXLAN_LOCAL6": (17, _ip),
}
_INFO_DATA = {"macvlan": MACVLAN_DATA, "vxlan": VXLAN_DATA}


class LinkInfo(Message):
    """IFLA_LINKINFO: INFO_DATA is decoded by the kind (macvlan, vxlan; else not known)."""

    __slots__ = ()

    def get_attr(self, name: str, default: Any = None) -> Any:
        if name != "IFLA_INFO_DATA":
            return super().get_attr(name, default)
        raw = self._raw.get(2)
        kind = super().get_attr("IFLA_INFO_KIND")
        table = _INFO_DATA.get(kind or "")
        if raw is None or table is None:
            return default
        return Message("IFLA_INFO_DATA", {}, parse_attrs(raw, 0, len(raw)), table)


LINKINFO: Table = {
    "IFLA_INFO_KIND": (1, _str),
    "IFLA_INFO_DATA": (2, bytes),
    "IFLA_INFO_SLAVE_KIND": (4, _str),
}


def _linkinfo(raw: bytes) -> LinkInfo:
    return LinkInfo("IFLA_LINKINFO", {}, parse_attrs(raw, 0, len(raw)), LINKINFO)


LINK: Table = {
    "IFLA_ADDRESS": (1, _mac),
    "IFLA_BROADCAST": (2, _mac),
    "IFLA_IFNAME": (3, _str),
    "IFLA_MTU": (4, _u32),
    "IFLA_LINK": (5, _u32),
    "IFLA_QDISC": (6, _str),
    "IFLA_MASTER": (10, _u32),
    "IFLA_TXQLEN": (13, _u32),
    "IFLA_OPERSTATE": (16, _operstate),
    "IFLA_LINKMODE": (17, _u8),
    "IFLA_LINKINFO": (18, _linkinfo),
    "IFLA_IFALIAS": (20, _str),
    "IFLA_GROUP": (27, _u32),
    "IFLA_PROMISCUITY": (30, _u32),
    "IFLA_NUM_TX_QUEUES": (31, _u32),
    "IFLA_NUM_RX_QUEUES": (32, _u32),
    "IFLA_CARRIER": (33, _u8),
    "IFLA_LINK_NETNSID": (37, _s32),
    "IFLA_MIN_MTU": (50, _u32),
    "IFLA_MAX_MTU": (51, _u32),
    "IFLA_PERM_ADDRESS": (54, _mac),
}

ADDR: Table = {
    "IFA_ADDRESS": (1, _ip),
    "IFA_LOCAL": (2, _ip),
    "IFA_LABEL": (3, _str),
    "IFA_BROADCAST": (4, _ip),
    "IFA_FLAGS": (8, _u32),
    "IFA_RT_PRIORITY": (9, _u32),
    "IFA_PROTO": (11, _u8),
}

ROUTE: Table = {
    "RTA_DST": (1, _ip),
    "RTA_SRC": (2, _ip),
    "RTA_IIF": (3, _u32),
    "RTA_OIF": (4, _u32),
    "RTA_GATEWAY": (5, _ip),
    "RTA_PRIORITY": (6, _u32),
    "RTA_PREFSRC": (7, _ip),
    "RTA_TABLE": (15, _u32),
    "RTA_MARK": (16, _u32),
    "RTA_PREF": (20, _u8),
    "RTA_UID": (25, _u32),
}


def link(payload: bytes) -> Message:
    family, ifi_type, index, flags, change = IFINFOMSG.unpack_from(payload, 0)
    fields = {"family": family, "ifi_type": ifi_type, "index": index, "flags": flags}
    fields["change"] = change
    raw = parse_attrs(payload, IFINFOMSG.size, len(payload))
    return Message("RTM_NEWLINK", fields, raw, LINK)


def addr(payload: bytes) -> Message:
    family, prefixlen, flags, scope, index = IFADDRMSG.unpack_from(payload, 0)
    fields = {"family": family, "prefixlen": prefixlen, "flags": flags, "scope": scope}
    fields["index"] = index
    raw = parse_attrs(payload, IFADDRMSG.size, len(payload))
    return Message("RTM_NEWADDR", fields, raw, ADDR)


def route(payload: bytes) -> Message:
    values = RTMSG.unpack_from(payload, 0)
    names = ("family", "dst_len", "src_len", "tos", "table", "proto", "scope", "type", "flags")
    raw = parse_attrs(payload, RTMSG.size, len(payload))
    return Message("RTM_NEWROUTE", dict(zip(names, values, strict=True)), raw, ROUTE)
