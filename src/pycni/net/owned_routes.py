"""Routes one program owns, marked with its own routing protocol number so it can find,
fix and remove exactly those (and never touch the kernel's or anyone else's)."""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass
from typing import Any

PROTO_PYCNI = 157  # unused by iproute2's rt_protos; shows as "proto 157"
RTNH_F_ONLINK = 0x4
MAIN_TABLE = 254
AF_INET = 2


@dataclass(frozen=True)
class OwnedRoute:
    dst: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    oif: int
    onlink: bool = False


def current(ipr: Any, proto: int = PROTO_PYCNI) -> dict[ipaddress.IPv4Network, OwnedRoute]:
    """Our IPv4 routes in the main table, by destination."""
    out: dict[ipaddress.IPv4Network, OwnedRoute] = {}
    for msg in ipr.get_routes(family=AF_INET, proto=proto):
        table = int(msg.get_attr("RTA_TABLE") or msg["table"])
        if table != MAIN_TABLE or int(msg["proto"]) != proto:
            continue
        dst, gw = msg.get_attr("RTA_DST"), msg.get_attr("RTA_GATEWAY")
        if dst is None or gw is None:
            continue
        net = ipaddress.IPv4Network(f"{dst}/{msg['dst_len']}")
        out[net] = OwnedRoute(
            net,
            ipaddress.IPv4Address(gw),
            int(msg.get_attr("RTA_OIF") or 0),
            bool(int(msg["flags"]) & RTNH_F_ONLINK),
        )
    return out


def replace(ipr: Any, route: OwnedRoute, proto: int = PROTO_PYCNI) -> None:
    spec: dict[str, Any] = {
        "dst": str(route.dst),
        "gateway": str(route.gateway),
        "oif": route.oif,
        "proto": proto,
    }
    if route.onlink:
        spec["flags"] = RTNH_F_ONLINK
    ipr.route("replace", **spec)


def delete(ipr: Any, route: OwnedRoute, proto: int = PROTO_PYCNI) -> None:
    try:
        ipr.route("del", dst=str(route.dst), gateway=str(route.gateway), proto=proto)
    except Exception as exc:
        if getattr(exc, "code", None) not in (errno.ESRCH, errno.ENOENT):
            raise


def sync(
    ipr: Any, wanted: dict[ipaddress.IPv4Network, OwnedRoute], proto: int = PROTO_PYCNI
) -> list[str]:
    """Make our routes exactly ``wanted``; returns what changed, one line each."""
    changes: list[str] = []
    have = current(ipr, proto)
    for dst, route in have.items():
        if wanted.get(dst) != route:
            delete(ipr, route, proto)
            if dst not in wanted:
                changes.append(f"route {dst} via {route.gateway} removed")
    for dst, route in wanted.items():
        if have.get(dst) != route:
            replace(ipr, route, proto)
            changes.append(f"route {dst} via {route.gateway} set")
    return changes
