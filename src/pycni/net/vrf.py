"""VRF devices: find or create one, move an interface (and its routes) in, and back out.

Enslaving a link to a VRF makes the kernel cycle it: its main-table routes are flushed and its
connected/local routes come back in the VRF's table; IPv6 global addresses survive only with
keep_addr_on_down. So, as the reference does, the link's universe-scope main-table routes are
read before and put into the VRF's table after, and lost IPv6 global addresses are re-added.
"""

from __future__ import annotations

import time

from pycni.net.errors import NetError
from pycni.net.netlink.kernel import (
    AF_INET,
    AF_INET6,
    MAIN_TABLE,
    RTN_UNICAST,
    IPInterface,
    Kernel,
    Link,
    NetlinkError,
    Route,
)

RT_SCOPE_UNIVERSE = 0
RTNH_F_ONLINK = 0x4
MAX_TABLE = 0xFFFFFFFF


class VrfError(NetError):
    """A VRF step the kernel or the namespace's state refused (the message says which)."""


def find(kernel: Kernel, name: str) -> Link | None:
    """The VRF called ``name``; None if no link has that name; VrfError if it is no VRF."""
    found = kernel.find_link(name)
    if found is not None and found.kind != "vrf":
        raise VrfError(f"Netlink {name} is not a VRF")
    return found


def free_table(kernel: Kernel) -> int:
    """The lowest table id (from 1) no VRF of this namespace uses, as the reference picks it."""
    taken = {link.vrf_table for link in kernel.links() if link.kind == "vrf"}
    table = 1
    while table in taken:
        table += 1
    if table > MAX_TABLE:  # pragma: no cover - 2^32 VRFs cannot exist
        raise VrfError("findFreeRoutingTableID: Failed to find an available routing id")
    return table


def create(kernel: Kernel, name: str, table: int) -> Link:
    """A new VRF ``name`` on ``table`` (0: a free one), set up."""
    if not table:
        table = free_table(kernel)
    try:
        kernel.add_vrf(name, table)
    except NetlinkError as exc:
        raise VrfError(f"could not add VRF {name}: {exc}") from None
    link = kernel.find_link(name)
    if link is None:
        raise VrfError(f"could not add VRF {name}: it vanished")
    try:
        kernel.set_link(link.index, up=True)
    except NetlinkError as exc:
        raise VrfError(f"could not set link up for VRF {name}: {exc}") from None
    return link


def members(kernel: Kernel, vrf: Link) -> list[Link]:
    """The links whose master is ``vrf``."""
    return [link for link in kernel.links() if link.master == vrf.index]


def movable_routes(kernel: Kernel, index: int, table: int = MAIN_TABLE) -> list[Route]:
    """The link's universe-scope unicast routes of ``table``: for IPv4 not the connected or
    local ones (the kernel remakes those), for IPv6 all but local and multicast ones."""
    out = []
    for family in (AF_INET, AF_INET6):
        for route in kernel.routes(family, table=table, oif=index):
            unicast = route.type in (None, RTN_UNICAST)  # not local, broadcast, multicast
            if route.scope == RT_SCOPE_UNIVERSE and unicast and not route.multipath_oifs:
                out.append(route)
    return out


def in_table(route: Route, table: int) -> Route:
    """``route`` as a request for ``table`` (only the on-link flag of the reply's flags)."""
    return Route(
        dst=route.dst,
        oif=route.oif,
        gateway=route.gateway,
        table=table,
        proto=route.proto,
        scope=route.scope,
        type=route.type,
        flags=route.flags & RTNH_F_ONLINK,
        priority=route.priority,
        prefsrc=route.prefsrc,
        mtu=route.mtu,
    )


def _global_v6(kernel: Kernel, index: int) -> list[IPInterface]:
    return [a.interface for a in kernel.addresses(index, AF_INET6) if a.scope == RT_SCOPE_UNIVERSE]


def check_free(kernel: Kernel, link: Link) -> None:
    """VrfError unless ``link`` has no master (a bridge port or another VRF's member)."""
    if link.master:
        try:
            master = kernel.link(link.master).name
        except NetlinkError as exc:
            raise VrfError(
                f"interface {link.name} has already a master set, could not retrieve the "
                f"name: {exc}"
            ) from None
        raise VrfError(f"interface {link.name} has already a master set: {master}")


def enslave(kernel: Kernel, vrf: Link, link: Link) -> list[Route]:
    """Put ``link`` into ``vrf`` with its routes; returns the main-table routes it had."""
    check_free(kernel, link)
    table = vrf.vrf_table or 0
    before = _global_v6(kernel, link.index)
    routes = movable_routes(kernel, link.index)
    try:
        kernel.set_link(link.index, master=vrf.index)
    except NetlinkError as exc:
        raise VrfError(f"could not set vrf {vrf.name} as master of {link.name}: {exc}") from None
    after = set(_global_v6(kernel, link.index))
    for iface in before:
        if iface in after:
            continue
        try:
            kernel.add_address(link.index, iface)
        except NetlinkError as exc:
            raise VrfError(
                f"could not restore address {iface} to {link.name} @ {vrf.name}: {exc}"
            ) from None
        _wait_local_route(kernel, link, table, iface)
    for route in routes:
        try:
            kernel.replace_route(in_table(route, table))
        except (NetlinkError, ValueError) as exc:
            raise VrfError(f"could not add route '{route.dst}': {exc}") from None
    return routes


def _wait_local_route(kernel: Kernel, link: Link, table: int, iface: IPInterface) -> None:
    """The kernel adds the local route of a re-added IPv6 address to the VRF table shortly
    after; wait for it (10 ms doubling, ~2.5 s in all), as the reference does."""
    for attempt in range(9):
        for route in kernel.routes(AF_INET6, table=table, oif=link.index):
            if route.dst.prefixlen == 128 and route.dst.network_address == iface.ip:
                return
        if attempt < 8:
            time.sleep(0.01 * (1 << attempt))
    raise VrfError(
        f"failed getting local/host addresses for {link.name} in table {table} with dst {iface}"
    )


def release(kernel: Kernel, link: Link, routes: list[Route]) -> None:
    """Undo ``enslave``: no master, ``routes`` back in the main table (best effort: one the
    kernel refuses, e.g. its gateway no longer on-link, is left out)."""
    kernel.set_link(link.index, master=0)
    for route in routes:
        try:
            kernel.replace_route(in_table(route, MAIN_TABLE))
        except (NetlinkError, ValueError):
            continue


def leave(kernel: Kernel, vrf: Link, link: Link) -> None:
    """Take ``link`` out of ``vrf`` with the routes it has in the VRF's table."""
    release(kernel, link, movable_routes(kernel, link.index, vrf.vrf_table or MAIN_TABLE))
