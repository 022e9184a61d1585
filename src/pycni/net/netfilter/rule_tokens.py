"""Every value that becomes part of a firewall rule is checked here, and only here.

A config, a prevResult or a runtimeConfig is not always written by the node's owner (Multus
attachments are tenant-written, podman users write conflists), yet its strings end up in an
``iptables-restore`` script or an nftables command. One stray newline in a restore script is a
new rule in any table; one ``"`` or ``;`` in nft text ends a string or a statement. So each
value is checked against what its place in a rule allows before it is used, and a value that
could change the structure of the script is refused with code 7 (invalid network config) and a
message naming the config field and what is allowed:

- no value may contain a control character (newline, NUL, DEL, …), a byte that was not UTF-8
  (Python's surrogate escapes), or be longer than its place allows;
- names (chains, interfaces) and keywords are tokens of a fixed alphabet with no character that
  ends a token, a string or a statement in either syntax (no quotes, ``;``, ``#``, braces,
  backslash or whitespace);
- addresses, prefixes and ports are parsed, and rules carry their canonical text.

The nftables side is additionally built as libnftables JSON commands (see nft.py), so a
value is a JSON string and never parsed as rule text; the checks keep the two backends' rules
the same and the errors early and precise.
"""

from __future__ import annotations

import ipaddress

from pycni.spec import validate
from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

CHAIN_MAX = 28  # iptables: "chain name must be shorter than 29 characters"
NFT_COMMENT_MAX = 128
_IFNAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# Verdicts and builtin chains are not something a config may jump to in our name.
_RESERVED_CHAINS = frozenset(
    {
        "ACCEPT",
        "DROP",
        "RETURN",
        "QUEUE",
        "REJECT",
        "MASQUERADE",
        "DNAT",
        "SNAT",
        "MARK",
        "PREROUTING",
        "INPUT",
        "FORWARD",
        "OUTPUT",
        "POSTROUTING",
    }
)


def refuse(field: str, problem: str, allowed: str) -> CNIError:
    """The one error shape of this module: code 7, the field, what is wrong, what is allowed."""
    return CNIError(INVALID_NETWORK_CONFIG, f"invalid config: {field} {problem}; {allowed}")


def shown(value: str, limit: int = 40) -> str:
    """A value for an error message: escaped (no raw control characters), shortened."""
    text = value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    text = repr(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


def control_character(value: str) -> str | None:
    """The first character that must never reach rule text, described; None when clean."""
    for ch in value:
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
            return f"control character {ch!r}"
        if 0xD800 <= code <= 0xDFFF:
            return "bytes that are not UTF-8"
    return None


def plain_text(field: str, value: object, max_len: int) -> str:
    """Free text for a rule comment: printable, at most ``max_len`` bytes."""
    if not isinstance(value, str):
        raise refuse(field, f"must be a string, got {type(value).__name__}", "use a string")
    bad = control_character(value)
    if bad is not None:
        raise refuse(field, f'contains {bad} in "{shown(value)}"', "use printable text")
    if len(value.encode("utf-8", "surrogateescape")) > max_len:
        raise refuse(field, f"is longer than {max_len} bytes", f"use at most {max_len} bytes")
    return value


def chain_name(field: str, value: object, max_len: int = CHAIN_MAX) -> str:
    """An iptables chain (or nftables chain of ours) named by a config."""
    allowed = f"a chain name is 1-{max_len} letters, digits, '_', '.' or '-', not starting with '-'"
    if not isinstance(value, str):
        raise refuse(field, f"must be a string, got {type(value).__name__}", allowed)
    if not value or len(value) > max_len or not validate.is_name(value):
        raise refuse(field, f'"{shown(value)}" is not a valid chain name', allowed)
    if value.upper() in _RESERVED_CHAINS:
        raise refuse(field, f'"{value}" is a builtin chain or target', allowed)
    return value


def interface_name(field: str, value: object, *, wildcard: str = "") -> str:
    """A Linux interface name that goes into a rule (``-i``, ``iifname``).

    The spec layer's rules (1-15 bytes, not ``.``/``..``, no ``/``, ``:`` or whitespace) plus
    an alphabet without quotes, ``;``, ``#``, braces or backslash, so the name is one token in
    both syntaxes. ``wildcard`` (``+`` for iptables, ``*`` for nft) may end the name."""
    allowed = "an interface name is 1-15 letters, digits, '_', '.' or '-'"
    if wildcard:
        allowed += f", optionally ending in '{wildcard}'"
    if not isinstance(value, str):
        raise refuse(field, f"must be a string, got {type(value).__name__}", allowed)
    stem = value[:-1] if wildcard and value.endswith(wildcard) and len(value) > 1 else value
    bad = control_character(value)
    if bad is not None or not stem.isascii():
        what = bad or "characters outside ASCII"
        raise refuse(field, f'contains {what} in "{shown(value)}"', allowed)
    try:
        validate.interface_name(stem)
    except CNIError as exc:
        problem = f'"{shown(value)}" is not a valid interface name ({exc.msg})'
        raise refuse(field, problem, allowed) from None
    if not stem or not all(ch in _IFNAME_CHARS for ch in stem):
        raise refuse(field, f'"{shown(value)}" is not a valid interface name', allowed)
    return value


def network(field: str, value: object, family: int | None = None) -> IPNetwork:
    """An address or prefix (``10.0.0.0/8``, ``fd00::1``); host bits are dropped as iptables
    does, so the rule reads back as written."""
    fam = {4: "an IPv4", 6: "an IPv6", None: "an IP"}[family]
    allowed = f"use {fam} address or CIDR prefix"
    if not isinstance(value, str):
        raise refuse(field, f"must be a string, got {type(value).__name__}", allowed)
    try:
        if not value.isascii() or "%" in value:  # Python accepts "fe80::1%<any text>"
            raise ValueError(value)
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise refuse(field, f'"{shown(value)}" is not an address or prefix', allowed) from None
    if family is not None and net.version != family:
        raise refuse(field, f'"{value}" is an IPv{net.version} address', allowed)
    return net


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address(field: str, value: object) -> IPAddress:
    """One address, no zone (``%eth0``): Python would keep any text after the ``%``."""
    allowed = "use an IPv4 or IPv6 address"
    if not isinstance(value, str):
        raise refuse(field, f"must be a string, got {type(value).__name__}", allowed)
    try:
        if not value.isascii() or "%" in value or "/" in value:
            raise ValueError(value)
        return ipaddress.ip_address(value)
    except ValueError:
        raise refuse(field, f'"{shown(value)}" is not an IP address', allowed) from None


def port(field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= 65535:
        raise refuse(field, f"{value!r} is not a port", "ports are 1-65535")
    return value


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    """One of a fixed set of keywords."""
    listed = ", ".join(f'"{a}"' for a in allowed if a)
    if not isinstance(value, str) or value not in allowed:
        text = shown(value) if isinstance(value, str) else repr(value)
        raise refuse(field, f'"{text}" is not allowed', f"use one of {listed}")
    return value


def iptables_word(field: str, value: str) -> str:
    """The last line of defence for a restore script: any argument without a control
    character can be quoted into one token; anything else would start a new line."""
    bad = control_character(value)
    if bad is not None:
        raise refuse(field, f'contains {bad} in "{shown(value)}"', "rule text must be printable")
    return value
