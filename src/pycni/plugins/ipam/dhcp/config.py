"""The dhcp IPAM plugin's config, declared for the decoder (read by the plugin and the daemon)."""

from __future__ import annotations

from typing import Any

from pycni.record import record
from pycni.spec.decode import UINT32_MAX, Bool, FilePath, Int, ListOf, Obj, Str, decode, option

SOCKET_PATH = FilePath(max_bytes=107)  # sun_path: 108 bytes with the NUL
OPTION_NAME = Str(max_len=64, no_control=True, what="a DHCP option name or number")


@record(frozen=True)
class ProvideOption:
    """An option the client sends: a literal ``value`` or the CNI_ARGS key ``fromArg``."""

    name: str = option("option", OPTION_NAME, "")
    value: str = option("value", Str(), "")
    from_arg: str = option("fromArg", Str(max_len=255), "")


@record(frozen=True)
class RequestOption:
    """An option the client asks the server for; ``skipDefault`` drops router+subnet mask."""

    name: str = option("option", OPTION_NAME, "")
    skip_default: bool = option("skipDefault", Bool(), False)


@record(frozen=True)
class DhcpIPAM:
    """The ``ipam`` section of a dhcp config."""

    daemon_socket_path: str = option("daemonSocketPath", SOCKET_PATH, "")
    priority: int = option("priority", Int(0, UINT32_MAX), 0)
    provide: list[ProvideOption] = option("provide", ListOf(Obj(ProvideOption)), factory=list)
    request: list[RequestOption] = option("request", ListOf(Obj(RequestOption)), factory=list)


def load(ipam: dict[str, Any] | None) -> DhcpIPAM:
    return decode(DhcpIPAM, ipam, "ipam")
