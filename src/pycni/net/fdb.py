"""Forwarding entries of a VXLAN device: which remote VTEP (underlay IP) owns a MAC."""

from __future__ import annotations

import errno
import ipaddress
from typing import Any

NUD_PERMANENT = 0x80
NTF_SELF = 0x02  # the entry belongs to the device itself, not to a bridge above it


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def remote_entries(ipr: Any, index: int) -> dict[str, Address]:
    """MAC → remote underlay address, for the device's unicast entries with a destination."""
    out: dict[str, Address] = {}
    for msg in ipr.fdb("dump", ifindex=index):
        if int(msg["ifindex"]) != index:
            continue
        mac, dst = msg.get_attr("NDA_LLADDR"), msg.get_attr("NDA_DST")
        if not mac or not dst or mac == "00:00:00:00:00:00":
            continue
        try:
            out[str(mac)] = ipaddress.ip_address(dst)
        except ValueError:
            continue
    return out


def set_remote(ipr: Any, index: int, mac: str, remote: Address) -> None:
    ipr.fdb(
        "replace",
        ifindex=index,
        lladdr=mac,
        dst=str(remote),
        state=NUD_PERMANENT,
        flags=NTF_SELF,
    )


def delete(ipr: Any, index: int, mac: str, remote: Address) -> None:
    try:
        ipr.fdb("del", ifindex=index, lladdr=mac, dst=str(remote), flags=NTF_SELF)
    except Exception as exc:
        if getattr(exc, "code", None) not in (errno.ENOENT, errno.ESRCH):
            raise
