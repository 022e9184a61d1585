"""The pre-decoder config helpers, kept for the plugins not yet declared with spec/decode.

New code declares a config dataclass and calls :func:`pycni.spec.decode.decode`; these
functions remain for the few loaders that still read one key at a time (portmap, firewall).
Keys match case-insensitively as Go's encoding/json does (``"bandWidth"``, ``"IPMasq"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pycni.spec.decode import check_text, join, lookup, shown
from pycni.spec.errors import InvalidConfig

__all__ = ["field", "lookup", "section"]

T = TypeVar("T")

_TYPE_NAMES = {
    bool: "a boolean",
    int: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def field(data: Mapping[str, Any], key: str, kind: type[T], default: T, where: str = "") -> T:
    """The value of ``key`` checked to be of ``kind``; ``null`` or absent gives ``default``.

    Strings also obey the decoder's text rules (UTF-8, no NUL, bounded length).
    """
    found, value = lookup(data, key)
    if not found or value is None:
        return default
    name = join(where, key)
    ok = isinstance(value, kind)
    if kind is int and isinstance(value, bool):
        ok = False
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)  # type: ignore[return-value]
    if not ok:
        raise InvalidConfig(
            f"invalid config: {name} must be {_TYPE_NAMES.get(kind, kind.__name__)}, "
            f"got {shown(value)}"
        )
    if isinstance(value, str):
        check_text(value, name)
    return value  # type: ignore[no-any-return]


def section(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A nested object (``{}`` when absent)."""
    return field(data, key, dict, {})
