"""Routes of a pod interface: add a result's routes, check they exist (CHECK)."""

from __future__ import annotations

from collections.abc import Iterable

from pycni.net.errors import NetError
from pycni.net.netlink.kernel import Kernel, NetlinkError, family_of
from pycni.net.netlink.kernel import Route as KernelRoute
from pycni.spec.result import IPAddress, IPInterface, Route

MAIN_TABLE = 254
RTPROT_BOOT = 3  # what Go's netlink library leaves routes with, so `ip route` reads the same


class RouteError(NetError):
    pass


def add_routes(
    kernel: Kernel,
    ifname: str,
    index: int,
    routes: Iterable[Route],
    v4gw: IPAddress | None,
    v6gw: IPAddress | None,
) -> None:
    for r in routes:
        gw = r.gw
        if gw is None:
            gw = v4gw if r.dst.version == 4 else v6gw
        route = KernelRoute(
            dst=r.dst,
            oif=index,
            gateway=gw,
            table=r.table if r.table is not None else MAIN_TABLE,
            proto=RTPROT_BOOT,
            scope=r.scope,
            priority=r.priority or None,
            mtu=r.mtu or 0,
        )
        try:
            kernel.add_route(route)
        except (NetlinkError, ValueError) as exc:
            via = str(gw) if gw is not None else "<nil>"
            raise RouteError(
                f"failed to add route '{r.dst} via {via} dev {ifname}': {exc}"
            ) from None


def _routes(
    kernel: Kernel, version: int, table: int = MAIN_TABLE, oif: int = 0
) -> list[KernelRoute]:
    """Routes of one family in ``table`` (through link ``oif`` when given): filtered by the
    kernel with pycni's native client, so the cost follows that table and link rather than
    every route of the namespace."""
    return kernel.routes(family_of(version), table, oif)


def prefix_route_exists(kernel: Kernel, index: int, address: IPInterface) -> bool:
    want = address.network
    return any(
        r.oif == index and r.dst == want for r in _routes(kernel, address.version, oif=index)
    )


def validate_routes(kernel: Kernel, ifname: str, routes: Iterable[Route]) -> None:
    """CHECK: every result route exists (same destination, and gateway when given)."""
    for r in routes:
        table = r.table if r.table is not None else MAIN_TABLE
        found = False
        for existing in _routes(kernel, r.dst.version, table):
            if existing.dst != r.dst:
                continue
            if r.gw is not None and existing.gateway != r.gw:
                continue
            found = True
            break
        if not found:
            via = str(r.gw) if r.gw is not None else "<nil>"
            raise RouteError(f"Failed to match route {r.dst} via {via} on interface {ifname}")
