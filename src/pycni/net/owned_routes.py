"""Routes one program owns, marked with its own routing protocol number so it can find,
fix and remove exactly those (and never touch the kernel's or anyone else's).

A route to a destination that already has someone else's route is never added over it
(``add`` is exclusive); only a route we own is ever replaced or deleted, and deletes name
our protocol, so the kernel itself refuses to remove a route that is not ours.
"""

from __future__ import annotations

import ipaddress

from pycni.net.netlink.kernel import AF_INET as AF_INET
from pycni.net.netlink.kernel import AF_INET6 as AF_INET6
from pycni.net.netlink.kernel import MAIN_TABLE as MAIN_TABLE
from pycni.net.netlink.kernel import Kernel, NetlinkError, Route
from pycni.record import record

PROTO_PYCNI = 157  # unused by iproute2's rt_protos; shows as "proto 157"
RTNH_F_ONLINK = 0x4
RT_SCOPE_LINK = 253

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def family_of(version: int) -> int:
    return AF_INET6 if version == 6 else AF_INET


@record(frozen=True)
class OwnedRoute:
    dst: Network
    gateway: Address | None
    oif: int
    onlink: bool = False


def _main_routes(kernel: Kernel, family: int) -> list[Route]:
    """Every main-table route of ``family`` (one kernel dump)."""
    return kernel.routes(family, table=MAIN_TABLE)


def default_oif(kernel: Kernel, family: int = AF_INET) -> int:
    """The output link of the main table's first default route of ``family`` (0: none).
    Read with the typed dump: pyroute2's default-route helper would import pyroute2, a
    tenth of a second of a starting agent's CPU."""
    for route in _main_routes(kernel, family):
        if not route.dst.prefixlen:
            return route.oif
    return 0


def current(
    kernel: Kernel, proto: int = PROTO_PYCNI, family: int = AF_INET
) -> dict[Network, OwnedRoute]:
    """Our routes of ``family`` in the main table, by destination (a default route too)."""
    out: dict[Network, OwnedRoute] = {}
    for route in _main_routes(kernel, family):
        if route.proto != proto:
            continue
        out[route.dst] = OwnedRoute(
            route.dst, route.gateway, route.oif, bool(route.flags & RTNH_F_ONLINK)
        )
    return out


@record(frozen=True)
class ForeignRoute:
    """A main-table route that is not ours (the kernel's, an administrator's, a plugin's)."""

    dst: Network
    connected: bool  # scope link, or an IPv6 route without gateway: directly on a link
    text: str


def foreign(kernel: Kernel, proto: int = PROTO_PYCNI, family: int = AF_INET) -> list[ForeignRoute]:
    """Every main-table route of ``family`` not marked ``proto`` (default routes and IPv6
    multicast/link-local left out)."""
    out = []
    for route in _main_routes(kernel, family):
        if route.proto == proto or not route.dst.prefixlen:
            continue
        net = route.dst
        if net.is_link_local or net.is_multicast:
            continue
        gw = route.gateway
        connected = route.scope == RT_SCOPE_LINK or (family == AF_INET6 and gw is None)
        text = f"{net} {'via ' + str(gw) if gw else 'scope link'} proto {route.proto}"
        out.append(ForeignRoute(net, connected, text))
    return out


def _route(route: OwnedRoute, proto: int) -> Route:
    return Route(
        dst=route.dst,
        oif=route.oif,
        gateway=route.gateway,
        proto=proto,
        flags=RTNH_F_ONLINK if route.onlink else 0,
    )


def replace(kernel: Kernel, route: OwnedRoute, proto: int = PROTO_PYCNI) -> None:
    """Change a route we own (the caller knows the destination's route is ours)."""
    kernel.replace_route(_route(route, proto))


def add(kernel: Kernel, route: OwnedRoute, proto: int = PROTO_PYCNI) -> bool:
    """Add a new route; False (nothing changed) when the destination already has a route
    that is not ours."""
    try:
        kernel.add_route(_route(route, proto))
    except NetlinkError as exc:
        if exc.exists:
            return False
        raise
    return True


def delete(kernel: Kernel, route: OwnedRoute, proto: int = PROTO_PYCNI) -> None:
    """Delete our route (the kernel matches the protocol: never someone else's)."""
    try:
        kernel.delete_route(Route(dst=route.dst, gateway=route.gateway, proto=proto))
    except NetlinkError as exc:
        if not exc.no_such_entry:
            raise


def sync(
    kernel: Kernel,
    wanted: dict[Network, OwnedRoute],
    proto: int = PROTO_PYCNI,
    family: int = AF_INET,
) -> list[str]:
    """Make our routes of ``family`` exactly ``wanted``; returns what changed, one line each."""
    changes: list[str] = []
    have = current(kernel, proto, family)
    for dst, route in have.items():
        if dst not in wanted:
            delete(kernel, route, proto)
            changes.append(f"route {dst} via {route.gateway} removed")
    for dst, route in wanted.items():
        if have.get(dst) == route:
            continue
        if dst in have:
            replace(kernel, route, proto)
            changes.append(f"route {dst} via {route.gateway} set")
        elif add(kernel, route, proto):
            changes.append(f"route {dst} via {route.gateway} set")
        else:
            changes.append(f"route {dst} not set: the node has a route there that is not ours")
    return changes


def update(
    kernel: Kernel,
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
            delete(kernel, route, proto)
            if dst not in after:
                changes.append(f"route {dst} via {route.gateway} removed")
    for dst, route in after.items():
        if before.get(dst) == route:
            continue
        if add(kernel, route, proto):
            changes.append(f"route {dst} via {route.gateway} set")
        else:
            changes.append(f"route {dst} not set: the node has a route there that is not ours")
    return changes
