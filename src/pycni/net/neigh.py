"""Permanent IPv4 neighbor (ARP) entries on one link: list, set, delete."""

from __future__ import annotations

import errno
import ipaddress
from typing import Any

NUD_PERMANENT = 0x80
AF_INET = 2


def permanent(ipr: Any, index: int) -> dict[ipaddress.IPv4Address, str]:
    """The link's permanent IPv4 neighbors: address → MAC."""
    out: dict[ipaddress.IPv4Address, str] = {}
    for msg in ipr.get_neighbours(family=AF_INET, ifindex=index):
        if int(msg["ifindex"]) != index or not int(msg["state"]) & NUD_PERMANENT:
            continue
        dst, mac = msg.get_attr("NDA_DST"), msg.get_attr("NDA_LLADDR")
        if dst and mac:
            out[ipaddress.IPv4Address(dst)] = str(mac)
    return out


def set_permanent(ipr: Any, index: int, address: ipaddress.IPv4Address, mac: str) -> None:
    ipr.neigh("replace", dst=str(address), lladdr=mac, ifindex=index, state=NUD_PERMANENT)


def delete(ipr: Any, index: int, address: ipaddress.IPv4Address) -> None:
    try:
        ipr.neigh("del", dst=str(address), ifindex=index)
    except Exception as exc:
        if getattr(exc, "code", None) not in (errno.ENOENT, errno.ESRCH):
            raise
