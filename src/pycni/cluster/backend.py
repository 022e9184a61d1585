"""What the agent needs from a data-path backend (host-gw, vxlan, ipip, wireguard), and the
per-peer route programming they share: one peer the kernel refuses costs that peer, never
the rest of the pass."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any, Protocol

from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.net import owned_routes
from pycni.net.netlink.kernel import Kernel
from pycni.record import field, record


@record(frozen=True)
class Underlay:
    """The node's link to the other nodes."""

    ifname: str
    index: int
    address: ipaddress.IPv4Address | ipaddress.IPv6Address  # of the family it carries
    mtu: int

    @property
    def version(self) -> int:
        return self.address.version


@record
class Applied:
    """What a sync or update did: one line per change, and the peers it could not program
    (subnet -> why; their partial state is removed again)."""

    changes: list[str] = field(default_factory=list)
    failed: dict[Net, str] = field(default_factory=dict)

    def merge(self, other: Applied) -> None:
        self.changes += other.changes
        self.failed.update(other.failed)


def guarded(applied: Applied, subnet: Net, step: Callable[[], None], what: str) -> bool:
    """Run one kernel step for ``subnet``'s peer; a refusal marks the peer failed."""
    try:
        step()
    except OSError as exc:  # NetlinkError is one
        applied.failed.setdefault(subnet, f"the kernel refused {what}: {exc}")
        return False
    except ValueError as exc:  # a value the encoder cannot put on the wire (codec.mac_bytes)
        applied.failed.setdefault(subnet, f"cannot encode {what}: {exc}")
        return False
    return True


def _add_route(kernel: Kernel, route: owned_routes.OwnedRoute, applied: Applied) -> None:
    """Add one route exclusively; a refusal marks its peer failed."""
    try:
        added = owned_routes.add(kernel, route)
    except OSError as exc:
        applied.failed.setdefault(route.dst, f"the kernel refused the route: {exc}")
        return
    if added:
        applied.changes.append(f"route {route.dst} via {route.gateway} set")
    else:
        applied.changes.append(
            f"route {route.dst} not set: the node has a route there that is not ours"
        )


def _delete_route(kernel: Kernel, route: owned_routes.OwnedRoute, applied: Applied) -> bool:
    try:
        owned_routes.delete(kernel, route)
    except OSError as exc:
        applied.changes.append(f"route {route.dst} could not be removed: {exc}")
        return False
    return True


def sync_routes(
    kernel: Kernel,
    wanted: dict[Net, owned_routes.OwnedRoute],
    family: int,
    applied: Applied,
) -> None:
    """Make the agent's routes of ``family`` exactly ``wanted`` (less the peers that fail),
    one route at a time."""
    have = owned_routes.current(kernel, family=family)
    for dst, route in wanted.items():
        if have.get(dst) == route or dst in applied.failed:
            continue
        if dst not in have:
            _add_route(kernel, route, applied)
            continue
        try:
            owned_routes.replace(kernel, route)
        except OSError as exc:
            applied.failed.setdefault(dst, f"the kernel refused the route: {exc}")
            continue
        applied.changes.append(f"route {dst} via {route.gateway} set")
    for dst, route in have.items():
        if dst in wanted and dst not in applied.failed:
            continue
        if _delete_route(kernel, route, applied) and dst not in wanted:
            applied.changes.append(f"route {dst} via {route.gateway} removed")


def update_routes(
    kernel: Kernel,
    before: dict[Net, owned_routes.OwnedRoute],
    after: dict[Net, owned_routes.OwnedRoute],
    applied: Applied,
) -> None:
    """``owned_routes.update`` one route at a time: a route the kernel refuses marks its
    peer failed and leaves the others."""
    for dst, route in before.items():
        deleted = after.get(dst) != route and _delete_route(kernel, route, applied)
        if deleted and dst not in after:
            applied.changes.append(f"route {dst} via {route.gateway} removed")
    for dst, route in after.items():
        if before.get(dst) != route and dst not in applied.failed:
            _add_route(kernel, route, applied)


class Backend(Protocol):
    type_name: str

    def claims(self, info: LeaseInfo) -> set[str]:
        """What a lease of this backend holds exclusively (e.g. ``VtepMAC m``): two leases
        claiming one thing would send one node's traffic to the other."""
        ...

    def backend_data(self) -> dict[str, Any]:
        """What other nodes need to reach us (published with the lease)."""
        ...

    def pod_mtu(self) -> int:
        """The MTU pods must use (written as FLANNEL_MTU)."""
        ...

    def set_pod_mtu(self, mtu: int) -> None:
        """Use ``mtu`` instead of the computed one (checked by the caller)."""
        ...

    def configure(self, own: Net) -> None:
        """Set up the local side once our subnet is known (and again after a change)."""
        ...

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> Applied:
        """Make the data path reach exactly ``remotes`` (less the peers that fail)."""
        ...

    def update(
        self, own: Net, before: dict[Net, LeaseInfo], after: dict[Net, LeaseInfo]
    ) -> Applied:
        """Move the data path from ``before`` (what the last sync or update left) to
        ``after`` touching only what differs, without reading the kernel's tables (a watch
        event's cheap path; ``sync`` repairs any drift)."""
        ...
