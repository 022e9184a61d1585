"""Link attributes the tuning plugin reads and changes: MAC, MTU, promisc, allmulti, txqlen, alias.

All calls take an open rtnl socket of the namespace the link lives in (one socket per call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IFF_PROMISC = 0x100
IFF_ALLMULTI = 0x200


@dataclass
class LinkAttrs:
    """The current values, as the reference reads them (promisc from the promiscuity counter)."""

    index: int
    mac: str
    mtu: int
    promisc: bool
    allmulti: bool
    txqlen: int
    alias: str


def read(ipr: Any, index: int) -> LinkAttrs:
    msg = ipr.get_links(index)[0]
    return LinkAttrs(
        index=index,
        mac=str(msg.get_attr("IFLA_ADDRESS") or ""),
        mtu=int(msg.get_attr("IFLA_MTU") or 0),
        promisc=int(msg.get_attr("IFLA_PROMISCUITY") or 0) != 0,
        allmulti=bool(int(msg["flags"]) & IFF_ALLMULTI),
        txqlen=int(msg.get_attr("IFLA_TXQLEN") or 0),
        alias=str(msg.get_attr("IFLA_IFALIAS") or ""),
    )


def set_mac(ipr: Any, index: int, mac: str) -> None:
    ipr.link("set", index=index, address=mac)


def set_mtu(ipr: Any, index: int, mtu: int) -> None:
    ipr.link("set", index=index, mtu=mtu)


def set_txqlen(ipr: Any, index: int, txqlen: int) -> None:
    ipr.link("set", index=index, txqlen=txqlen)


def set_alias(ipr: Any, index: int, alias: str) -> None:
    """An empty alias removes it (the kernel's rule for IFLA_IFALIAS)."""
    ipr.link("set", index=index, ifalias=alias)


def _set_flag(ipr: Any, index: int, flag: int, on: bool) -> None:
    ipr.link("set", index=index, flags=flag if on else 0, change=flag)


def set_promisc(ipr: Any, index: int, on: bool) -> None:
    _set_flag(ipr, index, IFF_PROMISC, on)


def set_allmulti(ipr: Any, index: int, on: bool) -> None:
    _set_flag(ipr, index, IFF_ALLMULTI, on)
