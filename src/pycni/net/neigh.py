"""Permanent neighbor entries (ARP, NDP) on one link: list, set, delete."""

from __future__ import annotations

import errno
import ipaddress
from typing import Any

NUD_PERMANENT = 0x80
AF_INET = 2


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def permanent(ipr: Any, index: int, family: int = AF_INET) -> dict[Address, str]:
    """The link's permanent neighbors of ``family``: address → MAC."""
    out: dict[Address, str] = {}
    for msg in ipr.get_neighbours(family=family, ifindex=index):
        if int(msg["ifindex"]) != index or not int(msg["state"]) & NUD_PERMANENT:
            continue
        dst, mac = msg.get_attr("NDA_DST"), msg.get_attr("NDA_LLADDR")
        if dst and mac:
            out[ipaddress.ip_address(dst)] = str(mac)
    return out


def set_permanent(ipr: Any, index: int, address: Address, mac: str) -> None:
    ipr.neigh("replace", dst=str(address), lladdr=mac, ifindex=index, state=NUD_PERMANENT)


def delete(ipr: Any, index: int, address: Address) -> None:
    try:
        ipr.neigh("del", dst=str(address), ifindex=index)
    except Exception as exc:
        if getattr(exc, "code", None) not in (errno.ENOENT, errno.ESRCH):
            raise
