"""Config pieces the plugins share.

Plugins declare their config as a record (pycni.record) and decode it with :mod:`pycni.spec.decode`;
the sections several of them read (``ipam.type``, ``dns``, a ``mac`` argument, an MTU) are
declared once here. Keys match case-insensitively as Go's encoding/json does.
"""

from __future__ import annotations

from pycni.record import record
from pycni.spec.decode import ETH_MAX_MTU, Int, ListOf, Str, option, shown
from pycni.spec.errors import InvalidConfig
from pycni.spec.result import DNS
from pycni.spec.validate import is_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MTU", "PLUGIN_TYPE", "DNSConf", "IPAMRef", "MacArg"]

# --- config pieces several plugins declare -------------------------------------------------------


ETH_MIN_MTU = 68
PLUGIN_TYPE = Str(
    max_len=255,
    valid=is_name,
    what="a plugin type (a file name in CNI_PATH)",
)


@record(frozen=True)
class IPAMRef:
    """The ``ipam`` section as a main plugin reads it: only its type (the rest is the
    IPAM plugin's, which gets the whole config)."""

    type: str = option("type", PLUGIN_TYPE, "")


@record(frozen=True)
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


@record(frozen=True)
class MacArg:
    """``mac`` as ``args.cni`` and ``runtimeConfig`` carry it (checked as a MAC by the plugin)."""

    mac: str = option("mac", Str(max_len=64), "")


@record(frozen=True)
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
