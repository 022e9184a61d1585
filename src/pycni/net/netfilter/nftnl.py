"""nf_tables over netlink, for the few per-pod operations that must not grow with the ruleset.

Why not libnftables' ``list chain``: it first loads its cache, and for a chain whose table
holds sets or maps that cache includes every element of every set: with nft 1.0.6 listing a
2-rule chain grows with the elements beside it (docs/benchmarks.md), so any ``list`` on a
per-pod path grows with the pod count. This module sends one NFT_MSG_GETRULE
dump filtered by table and chain (the kernel does the filtering) and decodes only the rule
handle and the comment (rule user data), so it costs O(rules in that chain). Likewise one
set element is fetched by its key (NFT_MSG_GETSETELEM, no dump), not by listing the set.

Adding or deleting set elements through libnftables also loads its cache first: every chain
and the elements of verdict maps of every table in the namespace (``add element`` grows with
the chains and vmap elements beside it: docs/benchmarks.md). So element
changes are sent here as one nf_tables batch (NEWSETELEM/DELSETELEM between BATCH_BEGIN and
BATCH_END: atomic, as a libnftables transaction), whose cost does not depend on the rest.
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (benchmarks.md)
import contextlib
import ipaddress
import os
import struct
from collections.abc import Sequence

from pycni.net.netlink import nfnetlink
from pycni.net.netlink.nfnetlink import NFGENMSG, RECV_SIZE, NfnetlinkError
from pycni.net.netlink.rtnl.wire import (
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    NLMSGHDR,
    RTATTR,
    align,
    attr,
    attr_str,
    nested,
    parse_attrs,
)
from pycni.record import record


def _nested(kind: int, payload: bytes) -> bytes:
    return nested(kind, [payload])


NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWRULE = 6
NFT_MSG_GETRULE = 7
NFTA_RULE_TABLE = 1
NFTA_RULE_CHAIN = 2
NFTA_RULE_HANDLE = 3
NFTA_RULE_USERDATA = 7
NFT_MSG_NEWSETELEM = 12
NFT_MSG_GETSETELEM = 13
NFT_MSG_DELSETELEM = 14
NFT_MSG_DELRULE = 8
NFT_MSG_DELCHAIN = 5
NFT_MSG_DELTABLE = 2
NFT_MSG_DELSET = 11
NFT_MSG_GETSET = 10
NFTA_TABLE_NAME = 1
NFTA_SET_TABLE = 1
NFTA_SET_NAME = 2
NLM_F_NONREC = 0x100  # on a delete: refuse (EBUSY) an object still in use instead of recursing
NFT_MSG_GETCHAIN = 4
NFTA_CHAIN_TABLE = 1
NFTA_CHAIN_NAME = 3
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFTA_SET_ELEM_LIST_TABLE = 1
NFTA_SET_ELEM_LIST_SET = 2
NFTA_SET_ELEM_LIST_ELEMENTS = 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY = 1
NFTA_SET_ELEM_DATA = 2
NFTA_SET_ELEM_USERDATA = 6
NFTA_SET_ELEM_KEY_END = 10
NFTA_DATA_VALUE = 1
NFTA_DATA_VERDICT = 2
NFTA_VERDICT_CHAIN = 2
NFTNL_UDATA_RULE_COMMENT = 0  # also NFTNL_UDATA_SET_ELEM_COMMENT
FAMILIES = {"ip": 2, "ip6": 10, "inet": 1, "arp": 3, "bridge": 7, "netdev": 5}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@record(frozen=True)
class Rule:
    handle: int
    comment: str


NftnlError = NfnetlinkError  # the kernel refused a request; ``errno`` is its error


@record(frozen=True)
class ElementChange:
    """Add (with an optional comment) or delete one element of a set or map (the key in the
    kernel's form: an address is ``ip.packed``; see ``concat_key``). ``data`` is a map
    element's value (not a verdict), ``key_end`` the last key of a range in an interval set of
    concatenations (sent equal to ``key`` for a single value, as nft does). ``exclusive``: an
    add fails with EEXIST when the key is present, instead of being a no-op."""

    add: bool
    set_name: str
    key: bytes
    comment: str = ""
    data: bytes = b""
    key_end: bytes = b""
    exclusive: bool = False


@record(frozen=True)
class Element:
    """A set or map element as the kernel holds it (``data`` empty for a set)."""

    key: bytes
    key_end: bytes
    data: bytes
    comment: str
    chain: str = ""  # a verdict map element's jump/goto target


@record(frozen=True)
class ChainRemoval:
    """Delete every rule of a (regular) chain, then the chain."""

    chain: str


@record(frozen=True)
class Removal:
    """Delete one object: a rule by ``handle`` of chain ``name``, or the set, chain or table
    ``name`` (the table's name for a table). ``only_if_unused`` sends NLM_F_NONREC: the
    kernel then refuses (EBUSY, aborting the whole batch) a set that holds elements, a chain
    that holds rules or is jumped to, a table that holds chains or sets, so a batch of such
    removals never takes what a concurrent change added; without it a chain goes with its
    rules."""

    kind: str  # "rule", "set", "chain" or "table"
    name: str
    handle: int = 0
    only_if_unused: bool = False


PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132, "dccp": 33, "udplite": 136}


def concat_key(parts: list[str]) -> bytes:
    """The kernel key of a concatenation of addresses, protocol names and ports (nft's
    ``10.0.0.1 . tcp . 8080``): each field in network order, padded to 4 bytes."""
    out = b""
    for part in parts:
        if part in PROTOCOLS:
            raw = bytes((PROTOCOLS[part],))
        elif part.isdigit():
            raw = int(part).to_bytes(2, "big")
        else:
            raw = ipaddress.ip_address(part.strip("[]")).packed
        out += raw + b"\0" * (-len(raw) % 4)
    return out


def comment_of(userdata: bytes) -> str:
    """The comment TLV (type 0) of a rule's user data, libnftnl's ``u8 type, u8 len, value``."""
    pos = 0
    while pos + 2 <= len(userdata):
        kind, length = userdata[pos], userdata[pos + 1]
        value = userdata[pos + 2 : pos + 2 + length]
        if kind == NFTNL_UDATA_RULE_COMMENT:
            return value.split(b"\0", 1)[0].decode(errors="replace")
        pos += 2 + length
    return ""


def _request(kind: int, flags: int, body: bytes) -> list[tuple[int, bytes]] | None:
    """One nf_tables request (see nfnetlink.request); None on ENOENT (no such table/chain/
    set/element)."""
    return nfnetlink.request(NFNL_SUBSYS_NFTABLES, kind, flags, body)


def chain_rules(family: str, table: str, chain: str) -> list[Rule]:
    """Every rule of ``family table chain`` in this thread's namespace, in order; empty when
    the table or the chain does not exist."""
    body = NFGENMSG.pack(FAMILIES[family], 0, 0)
    body += attr_str(NFTA_RULE_TABLE, table) + attr_str(NFTA_RULE_CHAIN, chain)
    out: list[Rule] = []
    for mtype, payload in _request(NFT_MSG_GETRULE, NLM_F_DUMP, body) or []:
        if mtype != NFT_MSG_NEWRULE:
            continue
        found = parse_attrs(payload, 0, len(payload))
        handle_raw = found.get(NFTA_RULE_HANDLE, b"")
        if len(handle_raw) == 8:
            (handle,) = struct.unpack("!Q", handle_raw)
            out.append(Rule(int(handle), comment_of(found.get(NFTA_RULE_USERDATA, b""))))
    return out


def chain_exists(family: str, table: str, chain: str) -> bool:
    """Whether ``family table chain`` exists in this thread's namespace (one NFT_MSG_GETCHAIN
    for that chain, not a listing)."""
    body = NFGENMSG.pack(FAMILIES[family], 0, 0)
    body += attr_str(NFTA_CHAIN_TABLE, table) + attr_str(NFTA_CHAIN_NAME, chain)
    return _request(NFT_MSG_GETCHAIN, NLM_F_ACK, body) is not None


def set_exists(family: str, table: str, set_name: str) -> bool:
    """Whether ``family table set_name`` exists (one NFT_MSG_GETSET for it): asking costs a
    round trip, while a batch that fails on a missing set costs the kernel an RCU grace
    period (docs/benchmarks.md)."""
    body = NFGENMSG.pack(FAMILIES[family], 0, 0)
    body += attr_str(NFTA_SET_TABLE, table) + attr_str(NFTA_SET_NAME, set_name)
    return _request(NFT_MSG_GETSET, NLM_F_ACK, body) is not None


def _elements_of(payload: bytes) -> list[Element]:
    """The elements of one NEWSETELEM message."""
    listed = parse_attrs(payload, 0, len(payload)).get(NFTA_SET_ELEM_LIST_ELEMENTS, b"")
    out: list[Element] = []
    pos = 0
    while pos + RTATTR.size <= len(listed):
        length, _kind = RTATTR.unpack_from(listed, pos)
        if length < RTATTR.size:
            break
        elem = parse_attrs(listed, pos + RTATTR.size, pos + length)

        def value(kind: int, elem: dict[int, bytes] = elem) -> bytes:
            return parse_attrs(elem.get(kind, b""), 0, 1 << 16).get(NFTA_DATA_VALUE, b"")

        data = elem.get(NFTA_SET_ELEM_DATA, b"")
        verdict = parse_attrs(data, 0, len(data)).get(NFTA_DATA_VERDICT, b"")
        target = parse_attrs(verdict, 0, len(verdict)).get(NFTA_VERDICT_CHAIN, b"")
        out.append(
            Element(
                value(NFTA_SET_ELEM_KEY),
                value(NFTA_SET_ELEM_KEY_END),
                value(NFTA_SET_ELEM_DATA),
                comment_of(elem.get(NFTA_SET_ELEM_USERDATA, b"")),
                target.split(b"\0", 1)[0].decode(errors="replace"),
            )
        )
        pos += align(length)
    return out


def _list_head(family: str, table: str, set_name: str) -> bytes:
    body = NFGENMSG.pack(FAMILIES[family], 0, 0)
    body += attr_str(NFTA_SET_ELEM_LIST_TABLE, table)
    return body + attr_str(NFTA_SET_ELEM_LIST_SET, set_name)


def get_element(
    family: str, table: str, set_name: str, key: bytes, key_end: bytes = b""
) -> Element | None:
    """One element by its key: a keyed lookup in the kernel (libnftables' ``get element``
    loads the whole set first). None when the set or the element does not exist."""
    elem = _nested(NFTA_SET_ELEM_KEY, attr(NFTA_DATA_VALUE, key))
    if key_end:
        elem += _nested(NFTA_SET_ELEM_KEY_END, attr(NFTA_DATA_VALUE, key_end))
    body = _list_head(family, table, set_name)
    body += _nested(NFTA_SET_ELEM_LIST_ELEMENTS, _nested(NFTA_LIST_ELEM, elem))
    replies = _request(NFT_MSG_GETSETELEM, NLM_F_ACK, body)
    for mtype, payload in replies or []:
        if mtype == NFT_MSG_NEWSETELEM:
            for found in _elements_of(payload):
                if found.key == key:
                    return found
    return None


def set_elements(family: str, table: str, set_name: str) -> list[Element] | None:
    """Every element of a set or map (one kernel dump: O(elements), for GC and repairs, not
    for a per-pod path). None when the table or the set does not exist."""
    replies = _request(NFT_MSG_GETSETELEM, NLM_F_DUMP, _list_head(family, table, set_name))
    if replies is None:
        return None
    out: list[Element] = []
    for mtype, payload in replies:
        if mtype == NFT_MSG_NEWSETELEM:
            out += _elements_of(payload)
    return out


def set_is_empty(family: str, table: str, set_name: str) -> bool | None:
    """Whether a set holds no element; None when the table or the set does not exist. One
    dump of the set, read but not decoded (its cost: docs/benchmarks.md): the kernel has no
    element count to ask for."""
    replies = _request(NFT_MSG_GETSETELEM, NLM_F_DUMP, _list_head(family, table, set_name))
    if replies is None:
        return None
    return not any(
        mtype == NFT_MSG_NEWSETELEM
        and parse_attrs(payload, 0, len(payload)).get(NFTA_SET_ELEM_LIST_ELEMENTS)
        for mtype, payload in replies
    )


def element_comment(family: str, table: str, set_name: str, address: IPAddress) -> str | None:
    """The comment of the element ``address`` of an address set (one keyed lookup). None when
    the set or the element does not exist; "" for an element without a comment."""
    found = get_element(family, table, set_name, address.packed)
    return None if found is None else found.comment


def _element_body(family: str, table: str, change: ElementChange) -> bytes:
    elem = _nested(NFTA_SET_ELEM_KEY, attr(NFTA_DATA_VALUE, change.key))
    if change.key_end:
        elem += _nested(NFTA_SET_ELEM_KEY_END, attr(NFTA_DATA_VALUE, change.key_end))
    if change.add and change.data:
        elem += _nested(NFTA_SET_ELEM_DATA, attr(NFTA_DATA_VALUE, change.data))
    if change.add and change.comment:
        text = change.comment.encode()[:254] + b"\0"
        elem += attr(NFTA_SET_ELEM_USERDATA, bytes((NFTNL_UDATA_RULE_COMMENT, len(text))) + text)
    body = NFGENMSG.pack(FAMILIES[family], 0, 0)
    body += attr_str(NFTA_SET_ELEM_LIST_TABLE, table)
    body += attr_str(NFTA_SET_ELEM_LIST_SET, change.set_name)
    return body + _nested(NFTA_SET_ELEM_LIST_ELEMENTS, _nested(NFTA_LIST_ELEM, elem))


def _chain_messages(family: str, table: str, removal: ChainRemoval) -> list[tuple[int, bytes]]:
    head = NFGENMSG.pack(FAMILIES[family], 0, 0) + attr_str(NFTA_RULE_TABLE, table)
    return [
        (NFT_MSG_DELRULE, head + attr_str(NFTA_RULE_CHAIN, removal.chain)),
        (NFT_MSG_DELCHAIN, head + attr_str(NFTA_CHAIN_NAME, removal.chain)),
    ]


def _removal_message(family: str, table: str, removal: Removal) -> tuple[int, int, bytes]:
    head = NFGENMSG.pack(FAMILIES[family], 0, 0)
    flags = NLM_F_NONREC if removal.only_if_unused else 0
    if removal.kind == "rule":
        body = head + attr_str(NFTA_RULE_TABLE, table) + attr_str(NFTA_RULE_CHAIN, removal.name)
        return NFT_MSG_DELRULE, 0, body + attr(NFTA_RULE_HANDLE, struct.pack("!Q", removal.handle))
    if removal.kind == "set":
        body = head + attr_str(NFTA_SET_TABLE, table) + attr_str(NFTA_SET_NAME, removal.name)
        return NFT_MSG_DELSET, flags, body
    if removal.kind == "chain":
        body = head + attr_str(NFTA_CHAIN_TABLE, table) + attr_str(NFTA_CHAIN_NAME, removal.name)
        return NFT_MSG_DELCHAIN, flags, body
    if removal.kind == "table":
        return NFT_MSG_DELTABLE, flags, head + attr_str(NFTA_TABLE_NAME, table)
    raise ValueError(f"unknown nf_tables object kind {removal.kind!r}")


def _fit_send_buffer(sock: socket.socket, size: int) -> None:
    """A netlink batch is one datagram: it must fit the socket's send buffer (a GC of
    hundreds of attachments exceeds the default). Grown as nft does, forced when allowed."""
    if size + 1024 <= sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2:
        return
    for option in (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, size + 4096)
            return


def batch_messages(
    family: str, table: str, changes: Sequence[ElementChange | ChainRemoval | Removal]
) -> list[tuple[int, int, bytes]]:
    """The (message type, flags, body) of each change, in order, as ``change_elements`` sends
    them between BATCH_BEGIN and BATCH_END (without the ack flag it adds to the last)."""
    todo: list[tuple[int, int, bytes]] = []
    for change in changes:
        if isinstance(change, Removal):
            kind, flags, body = _removal_message(family, table, change)
            todo.append(((NFNL_SUBSYS_NFTABLES << 8) | kind, NLM_F_REQUEST | flags, body))
            continue
        if isinstance(change, ChainRemoval):
            for kind, body in _chain_messages(family, table, change):
                todo.append(((NFNL_SUBSYS_NFTABLES << 8) | kind, NLM_F_REQUEST, body))
            continue
        kind = NFT_MSG_NEWSETELEM if change.add else NFT_MSG_DELSETELEM
        flags = NLM_F_REQUEST | (NLM_F_CREATE if change.add else 0)
        flags |= NLM_F_EXCL if change.add and change.exclusive else 0
        todo.append(
            ((NFNL_SUBSYS_NFTABLES << 8) | kind, flags, _element_body(family, table, change))
        )
    return todo


def change_elements(
    family: str, table: str, changes: Sequence[ElementChange | ChainRemoval | Removal]
) -> None:
    """Apply the changes in order as one atomic nf_tables batch. An add of an element that
    exists is a no-op (as nft's ``add``) unless ``exclusive`` (EEXIST), or when a map element's
    data differs (EBUSY); a delete of a missing one fails the whole batch.
    Raises NftnlError with the kernel's errno (ENOENT: no such table, set or element;
    EBUSY: a Removal ``only_if_unused`` of an object in use)."""
    if not changes:
        return
    conn = nfnetlink.connection()
    with conn.lock:
        first = conn.seq + 1
        parts: list[bytes] = []

        def message(kind: int, flags: int, body: bytes) -> None:
            conn.seq = (conn.seq + 1) & 0xFFFFFFFF
            header = NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags, conn.seq, 0)
            parts.append(header + body)

        # Only the last message asks for an ack: the kernel reports every failed message
        # anyway, and an ack per element would overflow the socket's receive buffer on a
        # large batch (GC of hundreds of attachments: ENOBUFS).
        todo = batch_messages(family, table, changes)
        batch = NFGENMSG.pack(0, 0, socket.htons(NFNL_SUBSYS_NFTABLES))
        message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, batch)
        for index, (kind, flags, body) in enumerate(todo):
            message(kind, flags | (NLM_F_ACK if index == len(todo) - 1 else 0), body)
        message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, batch)
        payload = b"".join(parts)
        _fit_send_buffer(conn.sock, len(payload))
        conn.sock.sendto(payload, (0, 0))
        ours = {(first + i) & 0xFFFFFFFF for i in range(len(parts))}
        waiting = {(conn.seq - 1) & 0xFFFFFFFF}  # the last change: acked, or refused
        while waiting:
            for mtype, mseq, payload in nfnetlink.replies(conn.sock.recv(RECV_SIZE)):
                if mtype == NLMSG_ERROR and mseq in ours:
                    (code,) = struct.unpack_from("=i", payload, 0)
                    if code:  # the batch was aborted; replies still queued are skipped later
                        raise NftnlError(-code, os.strerror(-code))
                    waiting.discard(mseq)
