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

The records these calls take and return, and the encoding of a batch, are in nft_records.py
(pure: plugins import those, never this transport).
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (benchmarks.md)
import contextlib
import os
import struct
from collections.abc import Sequence

from pycni.net.netfilter.nft_records import (
    FAMILIES,
    NFNL_MSG_BATCH_BEGIN,
    NFNL_MSG_BATCH_END,
    NFNL_SUBSYS_NFTABLES,
    NFT_MSG_GETCHAIN,
    NFT_MSG_GETRULE,
    NFT_MSG_GETSET,
    NFT_MSG_GETSETELEM,
    NFT_MSG_NEWRULE,
    NFT_MSG_NEWSETELEM,
    NFTA_CHAIN_NAME,
    NFTA_CHAIN_TABLE,
    NFTA_DATA_VALUE,
    NFTA_DATA_VERDICT,
    NFTA_LIST_ELEM,
    NFTA_RULE_CHAIN,
    NFTA_RULE_HANDLE,
    NFTA_RULE_TABLE,
    NFTA_RULE_USERDATA,
    NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_KEY,
    NFTA_SET_ELEM_KEY_END,
    NFTA_SET_ELEM_LIST_ELEMENTS,
    NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE,
    NFTA_SET_ELEM_USERDATA,
    NFTA_SET_NAME,
    NFTA_SET_TABLE,
    NFTA_VERDICT_CHAIN,
    ChainRemoval,
    Element,
    ElementChange,
    IPAddress,
    NftnlError,
    Removal,
    Rule,
    _nested,
    batch_messages,
    comment_of,
)
from pycni.net.netlink import nfnetlink
from pycni.net.netlink.nfnetlink import NFGENMSG, RECV_SIZE
from pycni.net.netlink.rtnl.wire import (
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    NLMSGHDR,
    RTATTR,
    align,
    attr,
    attr_str,
    parse_attrs,
)


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


def _fit_send_buffer(sock: socket.socket, size: int) -> None:
    """A netlink batch is one datagram: it must fit the socket's send buffer (a GC of
    hundreds of attachments exceeds the default). Grown as nft does, forced when allowed."""
    if size + 1024 <= sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2:
        return
    for option in (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, size + 4096)
            return


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
