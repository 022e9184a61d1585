"""Routes one program owns, marked with its own routing protocol number so it can find,
fix and remove exactly those (and never touch the kernel's or anyone else's).

A route to a destination that already has someone else's route is never added over it
(``add`` is exclusive); only a route we own is ever replaced or deleted, and deletes name
our protocol, so the kernel itself refuses to remove a route that is not ours.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass
from typing import Any

PROTO_PYCNI = 157  # unused by iproute2's rt_protos; shows as "proto 157"
RTNH_F_ONLINK = 0x4
MAIN_TABLE = 254
AF_INET = 2
RT_SCOPE_LINK = 253


@dataclass(frozen=True)
class OwnedRoute:
    dst: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None
    oif: int
    onlink: bool = False


def _dst(msg: Any) -> ipaddress.IPv4Network:
    """The destination of a route message; no RTA_DST is the default route."""
    dst = msg.get_attr("RTA_DST")
    return ipaddress.IPv4Network(f"{dst or '0.0.0.0'}/{int(msg['dst_len'])}", strict=False)


def _main_table(msg: Any) -> bool:
    return int(msg.get_attr("RTA_TABLE") or msg["table"]) == MAIN_TABLE


def current(ipr: Any, proto: int = PROTO_PYCNI) -> dict[ipaddress.IPv4Network, OwnedRoute]:
    """Our IPv4 routes in the main table, by destination (a default route included)."""
    out: dict[ipaddress.IPv4Network, OwnedRoute] = {}
    for msg in ipr.get_routes(family=AF_INET, proto=proto):
        if not _main_table(msg) or int(msg["proto"]) != proto:
            continue
        net = _dst(msg)
        gw = msg.get_attr("RTA_GATEWAY")
        out[net] = OwnedRoute(
            net,
            ipaddress.IPv4Address(gw) if gw else None,
            int(msg.get_attr("RTA_OIF") or 0),
            bool(int(msg["flags"]) & RTNH_F_ONLINK),
        )
    return out


@dataclass(frozen=True)
class ForeignRoute:
    """A main-table route that is not ours (the kernel's, an administrator's, a plugin's)."""

    dst: ipaddress.IPv4Network
    connected: bool  # scope link: a network directly on a link of this node
    text: str


def foreign(ipr: Any, proto: int = PROTO_PYCNI) -> list[ForeignRoute]:
    """Every IPv4 main-table route not marked ``proto`` (default routes left out)."""
    out = []
    for msg in ipr.get_routes(family=AF_INET):
        if not _main_table(msg) or int(msg["proto"]) == proto or not int(msg["dst_len"]):
            continue
        net = _dst(msg)
        connected = int(msg["scope"]) == RT_SCOPE_LINK
        gw = msg.get_attr("RTA_GATEWAY")
        text = f"{net} {'via ' + str(gw) if gw else 'scope link'} proto {int(msg['proto'])}"
        out.append(ForeignRoute(net, connected, text))
    return out


def _spec(route: OwnedRoute, proto: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"dst": str(route.dst), "oif": route.oif, "proto": proto}
    if route.gateway is not None:
        spec["gateway"] = str(route.gateway)
    if route.onlink:
        spec["flags"] = RTNH_F_ONLINK
    return spec


def replace(ipr: Any, route: OwnedRoute, proto: int = PROTO_PYCNI) -> None:
    """Change a route we own (the caller knows the destination's route is ours)."""
    ipr.route("replace", **_spec(route, proto))


def add(ipr: Any, route: OwnedRoute, proto: int = PROTO_PYCNI) -> bool:
    """Add a new route; False (nothing changed) when the destination already has a route
    that is not ours."""
    try:
        ipr.route("add", **_spec(route, proto))
    except Exception as exc:
        if getattr(exc, "code", None) == errno.EEXIST:
            return False
        raise
    return True


def delete(ipr: Any, route: OwnedRoute, proto: int = PROTO_PYCNI) -> None:
    """Delete our route (the kernel matches the protocol: never someone else's)."""
    spec: dict[str, Any] = {"dst": str(route.dst), "proto": proto}
    if route.gateway is not None:
        spec["gateway"] = str(route.gateway)
    try:
        ipr.route("del", **spec)
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
        if dst not in wanted:
            delete(ipr, route, proto)
            changes.append(f"route {dst} via {route.gateway} removed")
    for dst, route in wanted.items():
        if have.get(dst) == route:
            continue
        if dst in have:
            replace(ipr, route, proto)
            changes.append(f"route {dst} via {route.gateway} set")
        elif add(ipr, route, proto):
            changes.append(f"route {dst} via {route.gateway} set")
        else:
            changes.append(f"route {dst} not set: the node has a route there that is not ours")
    return changes
