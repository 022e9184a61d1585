"""host-gw: a route per remote node subnet via that node's underlay address.

Needs every node on one L2 segment (the remote address must be directly reachable);
no encapsulation, so pods keep the underlay's full MTU.
"""

from __future__ import annotations

from typing import Any

from pycni.cluster.backend import Applied, Underlay, sync_routes, update_routes
from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.net import owned_routes
from pycni.net.netlink.client import rtnl

TYPE = "host-gw"


class HostGateway:
    type_name = TYPE

    def __init__(self, underlay: Underlay) -> None:
        self.underlay = underlay
        self._mtu = underlay.mtu  # no encapsulation: the underlay's own MTU

    def backend_data(self) -> dict[str, Any]:
        return {}

    def claims(self, info: LeaseInfo) -> set[str]:
        return set()  # two subnets via one node's address move no one's pods

    def pod_mtu(self) -> int:
        return self._mtu

    def set_pod_mtu(self, mtu: int) -> None:
        self._mtu = mtu

    def configure(self, own: Net) -> None:
        return None

    def wanted(self, own: Net, remotes: dict[Net, LeaseInfo]) -> dict[Net, owned_routes.OwnedRoute]:
        """A route per remote subnet of our family via its node's underlay address."""
        return {
            subnet: owned_routes.OwnedRoute(subnet, info.public_ip, self.underlay.index)
            for subnet, info in remotes.items()
            if subnet != own
            and info.backend_type == TYPE
            and info.public_ip != self.underlay.address
            and subnet.version == info.public_ip.version == self.underlay.version
        }

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> Applied:
        applied = Applied()
        family = owned_routes.family_of(self.underlay.version)
        with rtnl() as kernel:
            sync_routes(kernel, self.wanted(own, remotes), family, applied)
        return applied

    def update(
        self, own: Net, before: dict[Net, LeaseInfo], after: dict[Net, LeaseInfo]
    ) -> Applied:
        applied = Applied()
        old, new = self.wanted(own, before), self.wanted(own, after)
        if old != new:
            with rtnl() as kernel:
                update_routes(kernel, old, new, applied)
        return applied
