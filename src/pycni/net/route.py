"""Routes of a pod interface: add a result's routes, check they exist (CHECK)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from pycni.spec.result import IPAddress, IPInterface, Route

MAIN_TABLE = 254
RTPROT_BOOT = 3  # what Go's netlink library leaves routes with, so `ip route` reads the same


class RouteError(Exception):
    pass


def add_routes(
    ipr: Any,
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
        spec: dict[str, Any] = {"dst": str(r.dst), "oif": index, "proto": RTPROT_BOOT}
        if gw is not None:
            spec["gateway"] = str(gw)
        if r.priority:
            spec["priority"] = r.priority
        if r.table is not None:
            spec["table"] = r.table
        if r.scope is not None:
            spec["scope"] = r.scope
        if r.mtu:
            spec["metrics"] = {"RTAX_MTU": r.mtu}
        try:
            ipr.route("add", **spec)
        except Exception as exc:
            via = str(gw) if gw is not None else "<nil>"
            raise RouteError(
                f"failed to add route '{r.dst} via {via} dev {ifname}': {exc}"
            ) from None


def _routes(ipr: Any, version: int, table: int = MAIN_TABLE, oif: int = 0) -> list[Any]:
    """Routes of one family in ``table`` (through link ``oif`` when given): filtered by the
    kernel with pycni's netlink client, so the cost follows that table and link rather than
    every route of the namespace; pyroute2 (PYCNI_NETLINK=pyroute2) dumps and filters here."""
    family = 2 if version == 4 else 10
    native = getattr(type(ipr), "routes_filtered", None)
    if native is not None:
        return list(native(ipr, family, table, oif))
    found = [m for m in ipr.get_routes(family=family) if _table_of(m) == table]
    return [m for m in found if not oif or int(m.get_attr("RTA_OIF") or 0) == oif]


def _table_of(msg: Any) -> int:
    return int(msg.get_attr("RTA_TABLE") or msg["table"])


def _dst_of(msg: Any, version: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    dst = msg.get_attr("RTA_DST")
    if dst is None:
        dst = "0.0.0.0" if version == 4 else "::"
    return ipaddress.ip_network(f"{dst}/{msg['dst_len']}", strict=False)


def prefix_route_exists(ipr: Any, index: int, address: IPInterface) -> bool:
    want = address.network
    for msg in _routes(ipr, address.version, oif=index):
        if int(msg.get_attr("RTA_OIF") or 0) == index and _dst_of(msg, address.version) == want:
            return True
    return False


def validate_routes(ipr: Any, ifname: str, routes: Iterable[Route]) -> None:
    """CHECK: every result route exists (same destination, and gateway when given)."""
    for r in routes:
        table = r.table if r.table is not None else MAIN_TABLE
        found = False
        for msg in _routes(ipr, r.dst.version, table):
            if _dst_of(msg, r.dst.version) != r.dst:
                continue
            gw = msg.get_attr("RTA_GATEWAY")
            if r.gw is not None and (gw is None or ipaddress.ip_address(gw) != r.gw):
                continue
            found = True
            break
        if not found:
            via = str(r.gw) if r.gw is not None else "<nil>"
            raise RouteError(f"Failed to match route {r.dst} via {via} on interface {ifname}")
