"""Config pieces the plugins share, and the pre-decoder helpers.

Plugins declare their config as a dataclass and decode it with :mod:`pycni.spec.decode`;
the sections several of them read (``ipam.type``, ``dns``, a ``mac`` argument, an MTU) are
declared once here. ``field``/``section`` remain for the loaders that still read one key at a
time (dnsname). Keys match case-insensitively as Go's encoding/json does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pycni.spec.decode import ETH_MAX_MTU, Int, ListOf, Str, check_text, join, lookup, option, shown
from pycni.spec.errors import InvalidConfig
from pycni.spec.result import DNS

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


# --- config pieces several plugins declare -------------------------------------------------------


ETH_MIN_MTU = 68
PLUGIN_TYPE = Str(
    max_len=255,
    pattern=r"[A-Za-z0-9][A-Za-z0-9_.\-]*",
    what="a plugin type (a file name in CNI_PATH)",
)


@dataclass(frozen=True)
class IPAMRef:
    """The ``ipam`` section as a main plugin reads it: only its type (the rest is the
    IPAM plugin's, which gets the whole config)."""

    type: str = option("type", PLUGIN_TYPE, "")


@dataclass(frozen=True)
class DNSConf:
    """A config's ``dns`` section (types.DNS)."""

    nameservers: list[str] = option("nameservers", ListOf(Str(max_len=255)), factory=list)
    domain: str = option("domain", Str(max_len=255), "")
    search: list[str] = option("search", ListOf(Str(max_len=255)), factory=list)
    options: list[str] = option("options", ListOf(Str(max_len=255)), factory=list)

    def to_dns(self) -> DNS:
        return DNS(
            nameservers=list(self.nameservers),
            domain=self.domain,
            search=list(self.search),
            options=list(self.options),
        )


@dataclass(frozen=True)
class MacArg:
    """``mac`` as ``args.cni`` and ``runtimeConfig`` carry it (checked as a MAC by the plugin)."""

    mac: str = option("mac", Str(max_len=64), "")


@dataclass(frozen=True)
class MTU:
    """An Ethernet-like link's MTU: 0 (the default) or ETH_MIN_MTU..ETH_MAX_MTU (68..65535).

    ``message`` (``{path}``, ``{value}``) replaces the text for a number out of range.
    """

    message: str = ""

    def describe(self) -> str:
        return f"0 or a number in [{ETH_MIN_MTU}, {ETH_MAX_MTU}]"

    def decode(self, value: Any, path: str) -> int:
        text = self.message or "invalid config: {path} must be " + self.describe() + ", got {value}"
        number: int = Int(0, ETH_MAX_MTU, text).decode(value, path)
        if 0 < number < ETH_MIN_MTU:
            raise InvalidConfig(text.format(path=path, value=shown(number)))
        return number
