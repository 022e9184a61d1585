"""What plugins and the nftables transports exchange: the nf_tables netlink records (rules
and elements read back, element changes and removals sent), their encoding into batch messages,
and the errors of both transports.

Pure: nothing here opens a socket or loads libnftables, so a plugin (which is handed its
nftables by ``req.host``, pycni.net.netfilter.nft_seam) may import it; the transports that
send and receive these are pycni.net.netfilter.nftnl (nf_tables netlink) and .nft
(libnftables).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence

from pycni.net.errors import NetfilterError
from pycni.net.netlink.nfnetlink import NFGENMSG, NfnetlinkError
from pycni.net.netlink.rtnl.wire import (
    NLM_F_CREATE,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    attr,
    attr_str,
    nested,
)
from pycni.record import record


class NftError(NetfilterError, RuntimeError):
    """nft refused a command; the message is nft's own."""


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
