"""Validation of names the runtime passes to plugins (pkg/utils/utils.go)."""

from __future__ import annotations

from pycni.spec.errors import InvalidConfig, InvalidEnv, UnknownContainer

__all__ = [
    "MAX_IFNAME_BYTES",
    "container_id",
    "interface_name",
    "is_mac",
    "is_name",
    "network_name",
]

MAX_IFNAME_BYTES = 15
# Character sets instead of regular expressions: ``re`` (with ``enum``) costs a one-shot plugin
# call more to import than these checks ever cost to run.
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_CHARS = _ALNUM | frozenset("_.-")
_HEX = frozenset("0123456789abcdefABCDEF")


def is_name(value: str, extra: str = "") -> bool:
    r"""CNI's name pattern ``^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`` (as Go reads it: no trailing
    newline allowed), with the characters of ``extra`` allowed after the first too."""
    allowed = _NAME_CHARS.union(extra) if extra else _NAME_CHARS
    return value != "" and value[0] in _ALNUM and all(ch in allowed for ch in value)


def is_mac(value: str, *, mixed_separators: bool = False) -> bool:
    """Six hex byte pairs split by ``:`` or ``-``: the same separator throughout, as the
    reference's MAC pattern, unless ``mixed_separators`` (the bridge's looser pattern)."""
    if len(value) != 17:
        return False
    separators = value[2::3]
    if any(sep not in ":-" for sep in separators):
        return False
    if not mixed_separators and separators.count(separators[0]) != len(separators):
        return False
    return all(value[i] in _HEX and value[i + 1] in _HEX for i in range(0, 17, 3))


def container_id(value: str) -> None:
    if value == "":
        raise UnknownContainer("missing containerID")
    if not is_name(value):
        raise InvalidEnv("invalid characters in containerID", value)


def network_name(value: str) -> None:
    if value == "":
        raise InvalidConfig("missing network name:")
    if not is_name(value):
        raise InvalidConfig("invalid characters found in network name", value)


def interface_name(value: str) -> None:
    if value == "":
        raise InvalidEnv("interface name is empty")
    if len(value.encode()) > MAX_IFNAME_BYTES:
        raise InvalidEnv(
            "interface name is too long",
            "interface name should be less than 16 characters",
        )
    if value in (".", ".."):
        raise InvalidEnv("interface name is . or ..")
    if any(ch in "/:" or ch.isspace() for ch in value):
        raise InvalidEnv(
            "interface name contains / or : or whitespace characters",
        )
