"""HybridIPRoute: pyroute2's IPRoute calls of the hot path done natively, the rest by pyroute2.

Every native method first checks that it was called with arguments it knows; anything else
(another command, an extra keyword) goes to a real pyroute2 IPRoute, so correctness never
depends on this subset being complete. That IPRoute is opened on first need, inside the
namespace of our own socket (found with SIOCGSKNS), whatever namespace the thread is in by
then; pyroute2 is imported only then.
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (~2 ms a call)
import fcntl
import os
from typing import Any

from pycni.net.rtnl import messages as m
from pycni.net.rtnl.wire import (
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLM_F_REPLACE,
    RtnlError,
    Socket,
    attr,
    attr_str,
    attr_u32,
    nested,
)

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26

IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_TXQLEN = 1, 3, 4, 10, 13
IFLA_LINKINFO, IFLA_IFALIAS, IFLA_NET_NS_FD, IFLA_EXT_MASK = 18, 20, 28, 29
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
RTEXT_FILTER_SKIP_STATS = 1 << 3
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_METRICS, RTA_TABLE = 1, 4, 5, 6, 8, 15
RTAX = {"RTAX_MTU": 2, "RTAX_ADVMSS": 8}
IFF_UP = 0x1
RT_TABLE_MAIN = 254
RTPROT_STATIC = 4
RTN_UNICAST = 1
SIOCGSKNS = 0x894C

_EXT_MASK = attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
_LINK_KINDS = {"bridge", "veth", "ifb"}
_LINK_SET_KEYS = {"index", "state", "master", "mtu", "address", "ifname", "net_ns_fd"}
_LINK_SET_KEYS |= {"flags", "change", "txqlen", "ifalias"}
_LINK_ADD_KEYS = {"ifname", "kind", "mtu", "address", "txqlen", "peer"}
_PEER_KEYS = {"ifname", "net_ns_fd", "mtu", "address"}
_ROUTE_KEYS = {"dst", "gateway", "oif", "proto", "scope", "table", "priority", "metrics"}


class Unsupported(Exception):
    """Not done natively: the call goes to pyroute2."""


def _mac(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":"))


def _ip(text: str) -> tuple[int, bytes]:
    """(family, packed) of an address."""
    if ":" in text:
        return socket.AF_INET6, socket.inet_pton(socket.AF_INET6, text)
    return socket.AF_INET, socket.inet_pton(socket.AF_INET, text)


def _ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return m.IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, flags, change)


class HybridIPRoute:
    """An IPRoute look-alike bound to the namespace of the thread that created it."""

    def __init__(self) -> None:
        self._sock = Socket()
        self._fallback: Any = None

    # ------------------------------------------------------------ lifecycle

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        self._sock.close()
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None

    def __enter__(self) -> HybridIPRoute:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pyroute2(self) -> Any:
        """The pyroute2 IPRoute of our namespace, opened on first use."""
        if self._fallback is None:
            from pyroute2 import IPRoute

            from pycni.net.ns import entered_fd

            ns_fd = fcntl.ioctl(self._sock.fileno(), SIOCGSKNS)
            try:
                with entered_fd(ns_fd):
                    ipr = IPRoute()
                    ipr.fileno()  # make sure its socket exists before we leave
            finally:
                os.close(ns_fd)
            self._fallback = ipr
        return self._fallback

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.pyroute2(), name)

    # ------------------------------------------------------------ links

    def link_lookup(self, *args: Any, **kwargs: Any) -> list[int]:
        if args or set(kwargs) != {"ifname"}:
            return list(self.pyroute2().link_lookup(*args, **kwargs))
        try:
            return [int(self._get_link(name=str(kwargs["ifname"]))["index"])]
        except RtnlError as exc:
            if exc.code in (19, 2):  # ENODEV, ENOENT
                return []
            raise

    def get_links(self, *indices: Any, **kwargs: Any) -> list[Any]:
        if kwargs or not all(isinstance(i, int) for i in indices):
            return list(self.pyroute2().get_links(*indices, **kwargs))
        if not indices:
            replies = self._sock.request(RTM_GETLINK, NLM_F_DUMP, _ifinfo() + _EXT_MASK)
            return [m.link(p) for t, p in replies if t == RTM_NEWLINK]
        return [self._get_link(index=i) for i in indices]

    def _get_link(self, index: int = 0, name: str = "") -> m.Message:
        body = _ifinfo(index) + _EXT_MASK + (attr_str(IFLA_IFNAME, name) if name else b"")
        for kind, payload in self._sock.request(RTM_GETLINK, 0, body):
            if kind == RTM_NEWLINK:
                return m.link(payload)
        raise RtnlError(19)

    def link(self, command: str, **kwargs: Any) -> list[Any]:
        try:
            return self._link(command, kwargs)
        except Unsupported:
            return list(self.pyroute2().link(command, **kwargs))

    def _link(self, command: str, kw: dict[str, Any]) -> list[Any]:
        if command == "get" and set(kw) in ({"index"}, {"ifname"}):
            if "index" in kw:
                return [self._get_link(index=int(kw["index"]))]
            return [self._get_link(name=str(kw["ifname"]))]
        if command == "del" and set(kw) == {"index"}:
            self._sock.request(RTM_DELLINK, NLM_F_ACK, _ifinfo(int(kw["index"])))
            return []
        if command == "set" and "index" in kw and set(kw) <= _LINK_SET_KEYS:
            self._link_set(kw)
            return []
        if command == "add" and kw.get("kind") in _LINK_KINDS and set(kw) <= _LINK_ADD_KEYS:
            self._link_add(kw)
            return []
        raise Unsupported(command)

    def _link_set(self, kw: dict[str, Any]) -> None:
        flags = int(kw.get("flags", 0))
        change = int(kw.get("change", 0))
        if "flags" in kw and "change" not in kw:
            change = 0xFFFFFFFF
        state = kw.get("state")
        if state is not None:
            if state not in ("up", "down"):
                raise Unsupported("state")
            change |= IFF_UP
            flags = flags | IFF_UP if state == "up" else flags & ~IFF_UP
        body = _ifinfo(int(kw["index"]), flags, change) + self._common_attrs(kw)
        if "master" in kw:
            body += attr_u32(IFLA_MASTER, int(kw["master"]))
        if "net_ns_fd" in kw:
            body += attr_u32(IFLA_NET_NS_FD, int(kw["net_ns_fd"]))
        if "ifalias" in kw:
            body += attr_str(IFLA_IFALIAS, str(kw["ifalias"]))
        self._sock.request(RTM_NEWLINK, NLM_F_ACK, body)

    @staticmethod
    def _common_attrs(kw: dict[str, Any]) -> bytes:
        out = b""
        if kw.get("ifname"):
            out += attr_str(IFLA_IFNAME, str(kw["ifname"]))
        if kw.get("mtu"):
            out += attr_u32(IFLA_MTU, int(kw["mtu"]))
        if kw.get("address"):
            out += attr(IFLA_ADDRESS, _mac(str(kw["address"])))
        if "txqlen" in kw:
            out += attr_u32(IFLA_TXQLEN, int(kw["txqlen"]))
        return out

    def _link_add(self, kw: dict[str, Any]) -> None:
        kind = str(kw["kind"])
        info = [attr_str(IFLA_INFO_KIND, kind)]
        peer = kw.get("peer")
        if peer is not None:
            if kind != "veth" or not isinstance(peer, dict) or not set(peer) <= _PEER_KEYS:
                raise Unsupported("peer")
            peer_body = _ifinfo() + self._common_attrs(peer)
            if "net_ns_fd" in peer:
                peer_body += attr_u32(IFLA_NET_NS_FD, int(peer["net_ns_fd"]))
            info.append(nested(IFLA_INFO_DATA, [attr(VETH_INFO_PEER, peer_body)]))
        body = _ifinfo() + self._common_attrs(kw) + nested(IFLA_LINKINFO, info)
        self._sock.request(RTM_NEWLINK, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, body)

    # ------------------------------------------------------------ addresses

    def addr(self, command: str, *args: Any, **kwargs: Any) -> list[Any]:
        if (
            args
            or command not in ("add", "del")
            or set(kwargs)
            != {
                "index",
                "address",
                "prefixlen",
            }
        ):
            return list(self.pyroute2().addr(command, *args, **kwargs))
        family, packed = _ip(str(kwargs["address"]))
        body = m.IFADDRMSG.pack(family, int(kwargs["prefixlen"]), 0, 0, int(kwargs["index"]))
        if family == socket.AF_INET:
            body += attr(IFA_LOCAL, packed)
        body += attr(IFA_ADDRESS, packed)
        if command == "add":
            self._sock.request(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, body)
        else:
            self._sock.request(RTM_DELADDR, NLM_F_ACK, body)
        return []

    def get_addr(self, **kwargs: Any) -> list[Any]:
        """Addresses, filtered by the kernel by link and family (NETLINK_GET_STRICT_CHK)."""
        if not set(kwargs) <= {"index", "family"}:
            return list(self.pyroute2().get_addr(**kwargs))
        index = int(kwargs.get("index") or 0)
        family = int(kwargs.get("family") or 0)
        body = m.IFADDRMSG.pack(family, 0, 0, 0, index)
        out = []
        for kind, payload in self._sock.request(RTM_GETADDR, NLM_F_DUMP, body):
            if kind != RTM_NEWADDR:
                continue
            msg = m.addr(payload)  # the kernel may not filter (old kernels): check again
            if (index and msg["index"] != index) or (family and msg["family"] != family):
                continue
            out.append(msg)
        return out

    # ------------------------------------------------------------ routes

    def dump_routes(self, family: int) -> list[Any]:
        """Every route of ``family`` in every table: one kernel dump, parsed natively
        (pyroute2's get_routes costs ~0.1 ms per route; the cluster agent dumps every pass)."""
        return self.routes_filtered(family)

    def routes_filtered(self, family: int, table: int = 0, oif: int = 0) -> list[Any]:
        """Routes of one family, filtered by the kernel by table and output link
        (NETLINK_GET_STRICT_CHK), then again here for kernels that do not filter."""
        header = m.RTMSG.pack(family, 0, 0, 0, table if 0 < table < 256 else 0, 0, 0, 0, 0)
        attrs = b""
        if table:
            attrs += attr_u32(RTA_TABLE, table)
        if oif:
            attrs += attr_u32(RTA_OIF, oif)
        try:
            replies = self._sock.request(RTM_GETROUTE, NLM_F_DUMP, header + attrs)
        except RtnlError as exc:
            if exc.code in (2, 19):  # no such table (ENOENT) or link (ENODEV): no routes
                return []
            raise
        out = []
        for kind, payload in replies:
            if kind != RTM_NEWROUTE:
                continue
            msg = m.route(payload)
            if msg["family"] != family:
                continue
            if table and int(msg.get_attr("RTA_TABLE") or msg["table"]) != table:
                continue
            if oif and int(msg.get_attr("RTA_OIF") or 0) != oif:
                continue
            out.append(msg)
        return out

    def route(self, command: str, *args: Any, **kwargs: Any) -> list[Any]:
        try:
            if args:
                raise Unsupported("positional")
            return self._route(command, kwargs)
        except Unsupported:
            return list(self.pyroute2().route(command, *args, **kwargs))

    def _route(self, command: str, kw: dict[str, Any]) -> list[Any]:
        if command == "get" and set(kw) == {"dst"}:
            try:
                family, packed = _ip(str(kw["dst"]))
            except OSError:
                raise Unsupported("dst") from None
            bits = 32 if family == socket.AF_INET else 128
            body = m.RTMSG.pack(family, bits, 0, 0, 0, 0, 0, 0, 0) + attr(RTA_DST, packed)
            replies = self._sock.request(RTM_GETROUTE, 0, body)
            return [m.route(p) for t, p in replies if t == RTM_NEWROUTE]
        if command not in ("add", "del", "replace") or not set(kw) <= _ROUTE_KEYS:
            raise Unsupported(command)
        if "dst" not in kw or isinstance(kw.get("scope"), str) or isinstance(kw.get("proto"), str):
            raise Unsupported("dst/scope")
        try:
            body = self._route_body(kw, deleting=command == "del")
        except (OSError, ValueError):  # e.g. dst="default": pyroute2 knows those spellings
            raise Unsupported("dst") from None
        if command == "add":
            flags = NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        elif command == "replace":
            flags = NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
        else:
            flags = NLM_F_ACK
        kind = RTM_DELROUTE if command == "del" else RTM_NEWROUTE
        self._sock.request(kind, flags, body)
        return []

    @staticmethod
    def _route_body(kw: dict[str, Any], deleting: bool) -> bytes:
        """As pyroute2: a new route defaults to proto static and type unicast; a delete
        leaves both 0 (any), so it matches the kernel's own routes (proto kernel)."""
        dst = str(kw["dst"])
        address, _, plen = dst.partition("/")
        family, packed = _ip(address)
        bits = 32 if family == socket.AF_INET else 128
        dst_len = int(plen) if plen else bits
        table = int(kw.get("table") or RT_TABLE_MAIN)
        default_proto, kind = (0, 0) if deleting else (RTPROT_STATIC, RTN_UNICAST)
        proto = default_proto if kw.get("proto") is None else int(kw["proto"])
        scope = int(kw.get("scope") or 0)
        header = m.RTMSG.pack(
            family, dst_len, 0, 0, table if table < 256 else 252, proto, scope, kind, 0
        )
        attrs = [attr_u32(RTA_TABLE, table)]
        if dst_len:
            attrs.append(attr(RTA_DST, packed))
        if kw.get("oif"):
            attrs.append(attr_u32(RTA_OIF, int(kw["oif"])))
        if kw.get("gateway"):
            gw_family, gw = _ip(str(kw["gateway"]))
            if gw_family != family:
                raise Unsupported("gateway family")
            attrs.append(attr(RTA_GATEWAY, gw))
        if kw.get("priority"):
            attrs.append(attr_u32(RTA_PRIORITY, int(kw["priority"])))
        metrics = kw.get("metrics")
        if metrics:
            if not isinstance(metrics, dict) or not set(metrics) <= set(RTAX):
                raise Unsupported("metrics")
            attrs.append(
                nested(RTA_METRICS, [attr_u32(RTAX[k], int(v)) for k, v in metrics.items()])
            )
        return header + b"".join(attrs)
