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
AF_INET6 = 10
RT_SCOPE_LINK = 253

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def family_of(version: int) -> int:
    return AF_INET6 if version == 6 else AF_INET


@dataclass(frozen=True)
class OwnedRoute:
    dst: Network
    gateway: Address | None
    oif: int
    onlink: bool = False


def _dst(msg: Any) -> Network:
    """The destination of a route message; no RTA_DST is the default route."""
    dst = msg.get_attr("RTA_DST")
    if not dst:
        dst = "::" if int(msg["family"]) == AF_INET6 else "0.0.0.0"
    return ipaddress.ip_network(f"{dst}/{int(msg['dst_len'])}", strict=False)


def _routes(ipr: Any, family: int) -> list[Any]:
    """Every route of ``family``: natively when the socket can (pycni's rtnl client), else
    through pyroute2."""
    if hasattr(type(ipr), "dump_routes"):
        return list(ipr.dump_routes(family))
    return list(ipr.get_routes(family=family))


def _main_table(msg: Any) -> bool:
    return int(msg.get_attr("RTA_TABLE") or msg["table"]) == MAIN_TABLE


def default_oif(ipr: Any, family: int = AF_INET) -> int:
    """The output link of the main table's first default route of ``family`` (0: none).
    Read with the native dump: pyroute2's get_default_routes would import pyroute2, a
    tenth of a second of a starting agent's CPU."""
    for msg in _routes(ipr, family):
        if _main_table(msg) and not int(msg["dst_len"]):
            return int(msg.get_attr("RTA_OIF") or 0)
    return 0


def current(ipr: Any, proto: int = PROTO_PYCNI, family: int = AF_INET) -> dict[Network, OwnedRoute]:
    """Our routes of ``family`` in the main table, by destination (a default route too)."""
    out: dict[Network, OwnedRoute] = {}
    for msg in _routes(ipr, family):
        if not _main_table(msg) or int(msg["proto"]) != proto:
            continue
        net = _dst(msg)
        gw = msg.get_attr("RTA_GATEWAY")
        out[net] = OwnedRoute(
            net,
            ipaddress.ip_address(gw) if gw else None,
            int(msg.get_attr("RTA_OIF") or 0),
            bool(int(msg["flags"]) & RTNH_F_ONLINK),
        )
    return out


@dataclass(frozen=True)
class ForeignRoute:
    """A main-table route that is not ours (the kernel's, an administrator's, a plugin's)."""

    dst: Network
    connected: bool  # scope link, or an IPv6 route without gateway: directly on a link
    text: str


def foreign(ipr: Any, proto: int = PROTO_PYCNI, family: int = AF_INET) -> list[ForeignRoute]:
    """Every main-table route of ``family`` not marked ``proto`` (default routes and IPv6
    multicast/link-local left out)."""
    out = []
    for msg in _routes(ipr, family):
        if not _main_table(msg) or int(msg["proto"]) == proto or not int(msg["dst_len"]):
            continue
        net = _dst(msg)
        if net.is_link_local or net.is_multicast:
            continue
        connected = int(msg["scope"]) == RT_SCOPE_LINK or (
            family == AF_INET6 and not msg.get_attr("RTA_GATEWAY")
        )
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
    ipr: Any, wanted: dict[Network, OwnedRoute], proto: int = PROTO_PYCNI, family: int = AF_INET
) -> list[str]:
    """Make our routes of ``family`` exactly ``wanted``; returns what changed, one line each."""
    changes: list[str] = []
    have = current(ipr, proto, family)
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


def update(
    ipr: Any,
    before: dict[Network, OwnedRoute],
    after: dict[Network, OwnedRoute],
    proto: int = PROTO_PYCNI,
) -> list[str]:
    """Change our routes from ``before`` (what the last ``sync`` left) to ``after`` without
    reading the table: only destinations whose route differs are touched, so one lease
    change costs one or two netlink requests however many routes there are. A changed route
    is deleted (by our protocol: never someone else's) and added again exclusively, so a
    route someone else put there meanwhile stays; ``sync`` corrects anything else later."""
    changes: list[str] = []
    for dst, route in before.items():
        if after.get(dst) != route:
            delete(ipr, route, proto)
            if dst not in after:
                changes.append(f"route {dst} via {route.gateway} removed")
    for dst, route in after.items():
        if before.get(dst) == route:
            continue
        if add(ipr, route, proto):
            changes.append(f"route {dst} via {route.gateway} set")
        else:
            changes.append(f"route {dst} not set: the node has a route there that is not ours")
    return changes
