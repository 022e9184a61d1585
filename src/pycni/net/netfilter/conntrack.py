"""Conntrack entries through nfnetlink (ctnetlink), in-process, no subprocess.

A UDP "connection" to a host port that was recorded before the DNAT rules existed keeps being
used for as long as traffic flows, so new rules never apply to it (plugins#123). Deleting the
entries whose *original* destination port is the host port makes the next packet go through
the new rules. Requests go to the calling thread's namespace (net/netlink/nfnetlink.py).

One dump per port, filtered by the kernel (CTA_FILTER: protocol and original destination port,
Linux 5.8 and later), so the table does not cross into user space; each entry found is deleted
by its original tuple, zone and id, so an entry that expired and was re-created meanwhile is
left alone. Older kernels ignore the filter and dump the family's whole table: the entries are
checked here as well.

A pod that goes leaves UDP entries behind too: a flow to a mapped host port, DNATed to the
pod, stays pinned to its address until the entry times out, and a new pod given that address
inherits the flows. ``delete_by_address`` (portmap's DEL) removes the entries the address
sent (original source) or answers (reply source), from one dump filtered by protocol.
"""

from __future__ import annotations

import struct

from pycni.net.netlink import nfnetlink
from pycni.net.netlink.kernel import AF_INET, AF_INET6
from pycni.net.netlink.nfnetlink import NFGENMSG
from pycni.net.netlink.rtnl.wire import NLM_F_ACK, NLM_F_DUMP, attr, nested, parse_attrs

NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 0, 1, 2
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_ID, CTA_ZONE, CTA_FILTER = 1, 2, 12, 18, 25
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_SRC = {AF_INET: 1, AF_INET6: 3}  # CTA_IP_V4_SRC, CTA_IP_V6_SRC
CTA_PROTO_NUM, CTA_PROTO_DST_PORT = 1, 3
CTA_FILTER_ORIG_FLAGS, CTA_FILTER_REPLY_FLAGS = 1, 2
CTA_FILTER_FLAG_PROTO_NUM, CTA_FILTER_FLAG_PROTO_DST_PORT = 1 << 3, 1 << 5
PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132}


def _nested(kind: int, payload: bytes) -> bytes:
    return nested(kind, [payload])


def _dump_request(af: int, proto: int, port: int) -> bytes:
    """A dump of ``af`` entries whose original tuple has protocol ``proto`` and destination
    port ``port`` (the kernel compares only the fields the filter flags name)."""
    tuple_proto = attr(CTA_PROTO_NUM, bytes([proto])) + attr(
        CTA_PROTO_DST_PORT, struct.pack("!H", port)
    )
    flags = CTA_FILTER_FLAG_PROTO_NUM | CTA_FILTER_FLAG_PROTO_DST_PORT
    return (
        NFGENMSG.pack(af, 0, 0)
        + _nested(CTA_TUPLE_ORIG, _nested(CTA_TUPLE_PROTO, tuple_proto))
        + _nested(
            CTA_FILTER,
            attr(CTA_FILTER_ORIG_FLAGS, struct.pack("=I", flags))
            + attr(CTA_FILTER_REPLY_FLAGS, struct.pack("=I", 0)),
        )
    )


def _original(entry: bytes) -> tuple[int, int, bytes, bytes | None, bytes | None] | None:
    """(protocol, destination port, the raw original tuple, zone, id) of a dumped entry."""
    found = parse_attrs(entry, 0, len(entry))
    tuple_raw = found.get(CTA_TUPLE_ORIG)
    if tuple_raw is None:
        return None
    proto_raw = parse_attrs(tuple_raw, 0, len(tuple_raw)).get(CTA_TUPLE_PROTO, b"")
    proto = parse_attrs(proto_raw, 0, len(proto_raw))
    num, port = proto.get(CTA_PROTO_NUM, b""), proto.get(CTA_PROTO_DST_PORT, b"")
    if len(num) != 1 or len(port) != 2:
        return None
    return num[0], struct.unpack("!H", port)[0], tuple_raw, found.get(CTA_ZONE), found.get(CTA_ID)


def _delete(af: int, tuple_raw: bytes, zone: bytes | None, entry_id: bytes | None) -> bool:
    """Delete one entry by its original tuple, zone and id; False when it expired meanwhile."""
    body = NFGENMSG.pack(af, 0, 0) + _nested(CTA_TUPLE_ORIG, tuple_raw)
    if zone is not None:
        body += attr(CTA_ZONE, zone)
    if entry_id is not None:
        body += attr(CTA_ID, entry_id)
    gone = nfnetlink.request(NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_DELETE, NLM_F_ACK, body)
    return gone is not None  # None: ENOENT


def _protocol_request(af: int, proto: int) -> bytes:
    """A dump of ``af`` entries of protocol ``proto`` (the kernel compares that alone)."""
    tuple_proto = _nested(CTA_TUPLE_PROTO, attr(CTA_PROTO_NUM, bytes([proto])))
    flags = struct.pack("=I", CTA_FILTER_FLAG_PROTO_NUM)
    return (
        NFGENMSG.pack(af, 0, 0)
        + _nested(CTA_TUPLE_ORIG, tuple_proto)
        + _nested(
            CTA_FILTER,
            attr(CTA_FILTER_ORIG_FLAGS, flags) + attr(CTA_FILTER_REPLY_FLAGS, struct.pack("=I", 0)),
        )
    )


def _source(tuple_raw: bytes | None, af: int) -> bytes | None:
    if tuple_raw is None:
        return None
    ip_raw = parse_attrs(tuple_raw, 0, len(tuple_raw)).get(CTA_TUPLE_IP, b"")
    return parse_attrs(ip_raw, 0, len(ip_raw)).get(CTA_IP_SRC[af])


def delete_by_address(address: bytes, protocol: str) -> int:
    """Delete the entries of ``protocol`` that ``address`` (packed, 4 or 16 bytes) sent or
    answers: original source (the pod's own flows) or reply source (flows to it, DNATed by a
    port mapping or not). Returns how many went.

    One dump per call, filtered by the kernel on family and protocol; the address is matched
    here. A dump walks the kernel's whole conntrack hash (shared by every namespace: 262144
    buckets here; its cost: docs/benchmarks.md), so one dump matching both directions costs
    half of two dumps filtered on one address each (an either-or filter does not exist; and an
    IPv6 address filter matched nothing on Linux 6.18)."""
    af = AF_INET if len(address) == 4 else AF_INET6
    proto = PROTOCOLS[protocol]
    request = _protocol_request(af, proto)
    replies = nfnetlink.request(NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_GET, NLM_F_DUMP, request)
    deleted = 0
    for kind, entry in replies or []:
        if kind != IPCTNL_MSG_CT_NEW:
            continue
        found = _original(entry)
        if found is None or found[0] != proto:
            continue
        _num, _port, tuple_raw, zone, entry_id = found
        reply = parse_attrs(entry, 0, len(entry)).get(CTA_TUPLE_REPLY)
        if address in (_source(tuple_raw, af), _source(reply, af)):
            deleted += _delete(af, tuple_raw, zone, entry_id)
    return deleted


def delete_by_dst_port(ports: list[int], protocol: str, family: int) -> int:
    """Delete entries with original destination port in ``ports``; returns how many went."""
    af = AF_INET if family == 4 else AF_INET6
    proto = PROTOCOLS[protocol]
    deleted = 0
    for port in sorted(set(ports)):
        replies = nfnetlink.request(
            NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_GET, NLM_F_DUMP, _dump_request(af, proto, port)
        )
        for kind, entry in replies or []:
            if kind != IPCTNL_MSG_CT_NEW:
                continue
            found = _original(entry)
            if found is None or found[:2] != (proto, port):
                continue
            _num, _port, tuple_raw, zone, entry_id = found
            deleted += _delete(af, tuple_raw, zone, entry_id)
    return deleted
