"""Typed, case-insensitive access to a plugin's JSON config.

Go's encoding/json matches keys case-insensitively, so configs in the wild use
e.g. ``"bandWidth"`` or ``"IPMasq"``; a strict lookup would break them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pycni.spec.errors import INVALID_NETWORK_CONFIG, CNIError

T = TypeVar("T")

_TYPE_NAMES = {
    bool: "a boolean",
    int: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def lookup(data: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """(found, value): an exact key wins, then the first case-insensitive match."""
    if key in data:
        return True, data[key]
    lowered = key.lower()
    for k, v in data.items():
        if k.lower() == lowered:
            return True, v
    return False, None


def field(data: Mapping[str, Any], key: str, kind: type[T], default: T, where: str = "") -> T:
    """The value of ``key`` checked to be of ``kind``; ``null`` or absent gives ``default``."""
    found, value = lookup(data, key)
    if not found or value is None:
        return default
    ok = isinstance(value, kind)
    if kind is int and isinstance(value, bool):
        ok = False
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)  # type: ignore[return-value]
    if not ok:
        name = f"{where}.{key}" if where else key
        raise CNIError(
            INVALID_NETWORK_CONFIG,
            f"invalid config: {name} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {value!r}",
        )
    return value  # type: ignore[no-any-return]


def section(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A nested object (``{}`` when absent)."""
    return field(data, key, dict, {})
