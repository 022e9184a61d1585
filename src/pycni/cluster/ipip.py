"""ipip: IPv4 in IPv4, no encryption, as flannel's ipip backend.

One tunnel device ``pycni.ipip`` with the node's underlay address as its local end and no
remote (flannel leaves the namespace's ``tunl0`` to its users the same way); per remote
node a route ``10.244.2.0/24 via <its underlay address> dev pycni.ipip onlink``: the kernel
encapsulates towards the route's gateway. Pods get the underlay's MTU less 20 bytes (the
outer IPv4 header). IPv4 only: IPv6 pods over it are not possible.
"""

from __future__ import annotations

import struct
from typing import Any

from pycni.cluster import tunnel
from pycni.cluster.backend import Applied, Underlay, sync_routes, update_routes
from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.net import owned_routes
from pycni.net import vxlan as vxdev
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import Kernel
from pycni.net.netlink.rtnl import wire

TYPE = "ipip"
DEVICE = "pycni.ipip"
OVERHEAD = 20
IFLA_IPTUN_LINK, IFLA_IPTUN_LOCAL, IFLA_IPTUN_PMTUDISC = 1, 2, 10


class Ipip:
    type_name = TYPE

    def __init__(self, underlay: Underlay) -> None:
        if underlay.version != 4:
            raise ValueError("ipip carries IPv4 over an IPv4 underlay only")
        self.underlay = underlay
        self._mtu = underlay.mtu - OVERHEAD
        self.index = 0

    def claims(self, info: LeaseInfo) -> set[str]:
        return set()  # a route per subnet via an address: nothing exclusive

    def backend_data(self) -> dict[str, Any]:
        return {}

    def pod_mtu(self) -> int:
        return self._mtu

    def set_pod_mtu(self, mtu: int) -> None:
        self._mtu = mtu

    def info_data(self) -> bytes:
        return b"".join(
            [
                wire.attr_u32(IFLA_IPTUN_LINK, self.underlay.index),
                wire.attr(IFLA_IPTUN_LOCAL, self.underlay.address.packed),
                wire.attr(IFLA_IPTUN_PMTUDISC, struct.pack("=B", 1)),
            ]
        )

    def _ensure_device(self, kernel: Kernel, own: Net) -> bool:
        before = self.index
        found = tunnel.ensure(kernel, DEVICE, TYPE, self._mtu, self.info_data())
        self.index = found.index
        vxdev.ensure_address(kernel, self.index, tunnel.own_address(own))
        return before != 0 and before != self.index

    def configure(self, own: Net) -> None:
        with rtnl() as kernel:
            self._ensure_device(kernel, own)

    def wanted(self, own: Net, remotes: dict[Net, LeaseInfo]) -> dict[Net, owned_routes.OwnedRoute]:
        return {
            subnet: owned_routes.OwnedRoute(subnet, info.public_ip, self.index, True)
            for subnet, info in remotes.items()
            if subnet != own
            and info.backend_type == TYPE
            and info.public_ip != self.underlay.address
            and subnet.version == info.public_ip.version == 4
        }

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> Applied:
        applied = Applied()
        with rtnl() as kernel:
            if self._ensure_device(kernel, own):
                applied.changes.append(f"device {DEVICE} recreated")
            sync_routes(kernel, self.wanted(own, remotes), owned_routes.AF_INET, applied)
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
