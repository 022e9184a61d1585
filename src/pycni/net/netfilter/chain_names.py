"""Chain names and comments derived from a network name and a container ID.

The reference plugins name per-container iptables chains with a sha512 hash of the plain
concatenation ``name + id`` (no separator), cut to 28 characters including the prefix, and
label rules with Go-quoted comments. A node moving from the reference plugins to pycni must
find those chains again, so these functions reproduce the names exactly.
"""

from __future__ import annotations

import hashlib
import json

MAX_CHAIN_LENGTH = 28
CHAIN_PREFIX = "CNI-"


def must_format_hash_with_prefix(length: int, prefix: str, text: str) -> str:
    """``(prefix + sha512hex(text))[:length]``; the prefix counts towards ``length``."""
    if len(prefix) >= length or length > 128:
        raise ValueError(f"invalid hash length {length} for prefix {prefix!r}")
    digest = hashlib.sha512(text.encode()).hexdigest()
    return (prefix + digest)[:length]


def format_chain_name(name: str, container_id: str) -> str:
    """``CNI-`` plus 24 hex characters (FormatChainName)."""
    return must_format_hash_with_prefix(MAX_CHAIN_LENGTH, CHAIN_PREFIX, name + container_id)


def must_format_chain_name_with_prefix(name: str, container_id: str, prefix: str) -> str:
    """``CNI-<prefix>`` plus hex up to 28 characters (MustFormatChainNameWithPrefix)."""
    return must_format_hash_with_prefix(
        MAX_CHAIN_LENGTH, CHAIN_PREFIX + prefix, name + container_id
    )


def go_quote(text: str) -> str:
    """Go's ``%q`` for the printable strings CNI names and IDs are made of."""
    out = []
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch.isprintable() and ord(ch) < 0x7F:
            out.append(ch)
        else:
            out.append(json.dumps(ch)[1:-1])
    return '"' + "".join(out) + '"'


def format_comment(name: str, container_id: str) -> str:
    """``name: "<name>" id: "<id>"`` (FormatComment)."""
    return f"name: {go_quote(name)} id: {go_quote(container_id)}"
