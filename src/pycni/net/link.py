"""Links: lookup by name, up/down, and the addresses on them."""

from __future__ import annotations

import contextlib
import ipaddress

from pycni.net.errors import NetError
from pycni.net.netlink.kernel import (
    IPV4_DEVCONF_ARP_NOTIFY,
    IPInterface,
    Kernel,
    Link,
    NetlinkError,
)


class LinkNotFound(NetError, LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f'Link not found: "{name}"')
        self.name = name


def get(kernel: Kernel, name: str) -> Link:
    """The link called ``name`` in the client's namespace; LinkNotFound if none."""
    found = kernel.find_link(name)
    if found is None:
        raise LinkNotFound(name)
    return found


def index_of(kernel: Kernel, name: str) -> int:
    return get(kernel, name).index


def addresses(kernel: Kernel, index: int) -> list[IPInterface]:
    """Every address on the link, IPv4 first, as the kernel reports them (one dump
    filtered by the kernel when it can: see net/addrdump.py for why that matters)."""
    out = [a.interface for a in kernel.addresses(index=index)]
    out.sort(key=lambda a: a.version)
    return out


def set_arp_notify(kernel: Kernel, index: int) -> None:
    """net.ipv4.conf.<link>.arp_notify=1 (a gratuitous ARP when the link comes up or its
    address changes), best effort as the reference's sysctl write. Set over netlink: the same
    state as the /proc/sys write, without creating the pod's /proc/sys/net/ipv4 entry that
    every later /proc/sys/net/ipv4 lookup on the machine must walk past (docs/benchmarks.md)."""
    with contextlib.suppress(NetlinkError):
        kernel.set_ipv4_conf(index, {IPV4_DEVCONF_ARP_NOTIFY: 1})


# --- used by the interface plugins (bridge, …) ------------------------------------------------

# The bridge port-up wait: the reference looks after 0, 50, 500, 1000 and 1000 ms. A veth port is
# usually up within a few milliseconds, so we look every 2 ms for the first 50 ms instead of
# sleeping 50 ms at once, then follow the reference's schedule (same total wait, ~2.55 s).
PORT_UP_SCHEDULE = (0.0,) + (0.002,) * 25 + (0.5, 1.0, 1.0)


def get_by_index(kernel: Kernel, index: int) -> Link | None:
    try:
        return kernel.link(index)
    except NetlinkError as exc:
        if exc.no_such_link:
            return None
        raise


def delete_by_name(kernel: Kernel, name: str) -> list[IPInterface]:
    """Delete a link and return its global unicast addresses (pkg/ip's DelLinkByNameAddr).

    Raises LinkNotFound when there is no such link.
    """
    idx = index_of(kernel, name)
    found = [a for a in addresses(kernel, idx) if is_global_unicast(a.ip)]
    try:
        kernel.delete_link(idx)
    except NetlinkError as exc:
        if not exc.no_such_link:
            raise
    return found


def is_global_unicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's IP.IsGlobalUnicast: private ranges count, link-local/loopback/multicast do not."""
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local:
        return False
    return not (ip.version == 4 and ip == ipaddress.IPv4Address("255.255.255.255"))


def wait_oper_up(
    kernel: Kernel, index: int, schedule: tuple[float, ...] = PORT_UP_SCHEDULE
) -> tuple[Link | None, str]:
    """Look at the link's operational state after each delay in ``schedule``.

    Returns (the link, "up") as soon as it is up, else (None, last state seen): the caller
    reads the up link's attributes from it rather than asking the kernel again.
    """
    import time

    state = "unknown"
    for delay in schedule:
        if delay:
            time.sleep(delay)
        found = get_by_index(kernel, index)
        if found is None:
            return None, "notpresent"
        state = found.oper_state
        if state == "up":
            return found, state
    return None, state
