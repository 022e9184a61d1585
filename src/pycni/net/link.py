"""Links: lookup by name, up/down, and the addresses on them."""

from __future__ import annotations

import ipaddress
from typing import Any

from pycni.net.netlink import rtnl

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


class LinkNotFound(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f'Link not found: "{name}"')
        self.name = name


def index_of(ipr: Any, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise LinkNotFound(name)
    return int(found[0])


def set_state(name: str, up: bool) -> int:
    """Set a link up or down in the current namespace; returns its index."""
    with rtnl() as ipr:
        idx = index_of(ipr, name)
        ipr.link("set", index=idx, state="up" if up else "down")
        return idx


def flags_of(name: str) -> int:
    with rtnl() as ipr:
        idx = index_of(ipr, name)
        return int(ipr.get_links(idx)[0]["flags"])


def addresses(ipr: Any, index: int) -> list[IPInterface]:
    """Every address on the link, IPv4 first, as the kernel reports them."""
    out: list[IPInterface] = []
    for msg in ipr.get_addr(index=index):
        addr = msg.get_attr("IFA_ADDRESS") or msg.get_attr("IFA_LOCAL")
        if addr:
            out.append(ipaddress.ip_interface(f"{addr}/{msg['prefixlen']}"))
    out.sort(key=lambda a: a.version)
    return out
