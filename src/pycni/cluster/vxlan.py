"""vxlan: an overlay device per node; per remote node a neighbor, an FDB entry and a route.

For a remote subnet 10.244.2.0/24 owned by VTEP MAC m at underlay address u::

    neighbor  10.244.2.0 lladdr m dev pycni.1          (so no ARP crosses the overlay)
    fdb       m dst u dev pycni.1                       (where to send frames for m)
    route     10.244.2.0/24 via 10.244.2.0 dev pycni.1 onlink

The device carries the node subnet's network address as a /32 and an MTU below the
underlay's by the encapsulation overhead (50 bytes over an IPv4 underlay, 70 over IPv6);
pods get that MTU too.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pycni import record
from pycni.cluster.backend import Underlay
from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.net import fdb, neigh, owned_routes
from pycni.net import vxlan as vxdev
from pycni.net.kernel import Kernel
from pycni.net.netlink import rtnl

TYPE = "vxlan"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_VNI = 1


def device_name(vni: int, version: int = 4) -> str:
    """``pycni.<VNI>`` for IPv4 pods over an IPv4 underlay, ``pycni-v6.<VNI>`` for IPv6."""
    return f"pycni-v6.{vni}" if version == 6 else f"pycni.{vni}"


def _own_address(own: Net) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """The device's address: the node subnet's network address, alone."""
    return ipaddress.ip_interface(f"{own.network_address}/{own.max_prefixlen}")


class Vxlan:
    type_name = TYPE

    def __init__(self, underlay: Underlay, vni: int = DEFAULT_VNI, port: int = vxdev.DEFAULT_PORT):
        self.underlay = underlay
        self.spec = vxdev.VxlanSpec(
            device_name(vni, underlay.version),
            vni,
            underlay.address,
            underlay.index,
            self.computed_mtu(),
            port,
        )
        self.mac = ""
        self.index = 0

    def computed_mtu(self) -> int:
        """The underlay's MTU minus what encapsulation over its address family costs."""
        return self.underlay.mtu - vxdev.overhead(self.underlay.address.version)

    def pod_mtu(self) -> int:
        return self.spec.mtu

    def set_pod_mtu(self, mtu: int) -> None:
        self.spec = record.replace(self.spec, mtu=mtu)

    def _ensure_device(self, kernel: Kernel) -> None:
        self.index, self.mac = vxdev.ensure(kernel, self.spec)

    def backend_data(self) -> dict[str, Any]:
        if not self.mac:
            with rtnl() as kernel:
                self._ensure_device(kernel)
        return {"VNI": self.spec.vni, "VtepMAC": self.mac}

    def configure(self, own: Net) -> None:
        with rtnl() as kernel:
            self._ensure_device(kernel)
            vxdev.ensure_address(kernel, self.index, _own_address(own))

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> list[str]:
        changes: list[str] = []
        with rtnl() as kernel:
            before = self.index
            self._ensure_device(kernel)
            if self.index != before:
                vxdev.ensure_address(kernel, self.index, _own_address(own))
                changes.append(f"device {self.spec.name} recreated")
            peers = self._peers(own, remotes)
            changes += self._sync_neighbors(kernel, peers)
            changes += self._sync_fdb(kernel, peers)
            family = owned_routes.family_of(self.underlay.version)
            changes += owned_routes.sync(kernel, self._routes(peers), family=family)
        return changes

    def update(
        self, own: Net, before: dict[Net, LeaseInfo], after: dict[Net, LeaseInfo]
    ) -> list[str]:
        old, new = self._peers(own, before), self._peers(own, after)
        if old == new:
            return []
        changes: list[str] = []
        with rtnl() as kernel:
            old_neigh = {s.network_address: mac for s, (_ip, mac) in old.items()}
            new_neigh = {s.network_address: mac for s, (_ip, mac) in new.items()}
            for address in old_neigh.keys() - new_neigh.keys():
                neigh.delete(kernel, self.index, address)
                changes.append(f"neighbor {address} removed")
            for address, mac in new_neigh.items():
                if old_neigh.get(address) != mac:
                    neigh.set_permanent(kernel, self.index, address, mac)
                    changes.append(f"neighbor {address} -> {mac} set")
            old_fdb = {mac: public for public, mac in old.values()}
            new_fdb = {mac: public for public, mac in new.values()}
            for mac, dst in old_fdb.items():
                if new_fdb.get(mac) != dst:
                    fdb.delete(kernel, self.index, mac, dst)
                    if mac not in new_fdb:
                        changes.append(f"fdb {mac} removed")
            for mac, dst in new_fdb.items():
                if old_fdb.get(mac) != dst:
                    fdb.set_remote(kernel, self.index, mac, dst)
                    changes.append(f"fdb {mac} -> {dst} set")
            changes += owned_routes.update(kernel, self._routes(old), self._routes(new))
        return changes

    def _peers(self, own: Net, remotes: dict[Net, LeaseInfo]) -> dict[Net, tuple[Address, str]]:
        """The remote VTEPs to reach: subnet -> (underlay address, VTEP MAC)."""
        return {
            subnet: (info.public_ip, str(info.backend_data.get("VtepMAC", "")).lower())
            for subnet, info in remotes.items()
            if subnet != own
            and info.backend_type == TYPE
            and info.public_ip != self.underlay.address
            and subnet.version == info.public_ip.version == self.underlay.version
            and info.backend_data.get("VtepMAC")
        }

    def _routes(self, peers: dict[Net, tuple[Address, str]]) -> dict[Net, owned_routes.OwnedRoute]:
        return {
            subnet: owned_routes.OwnedRoute(subnet, subnet.network_address, self.index, True)
            for subnet in peers
        }

    def _sync_neighbors(self, kernel: Kernel, peers: dict[Net, tuple[Address, str]]) -> list[str]:
        wanted: dict[Address, str] = {
            subnet.network_address: mac for subnet, (_ip, mac) in peers.items()
        }
        family = owned_routes.family_of(self.underlay.version)
        have = neigh.permanent(kernel, self.index, family)
        changes = []
        for address in have.keys() - wanted.keys():
            neigh.delete(kernel, self.index, address)
            changes.append(f"neighbor {address} removed")
        for address, mac in wanted.items():
            if have.get(address, "").lower() != mac:
                neigh.set_permanent(kernel, self.index, address, mac)
                changes.append(f"neighbor {address} -> {mac} set")
        return changes

    def _sync_fdb(self, kernel: Kernel, peers: dict[Net, tuple[Address, str]]) -> list[str]:
        wanted: dict[str, Address] = {mac: public for public, mac in peers.values()}
        have = {mac.lower(): dst for mac, dst in fdb.remote_entries(kernel, self.index).items()}
        changes = []
        for mac, dst in have.items():
            if wanted.get(mac) != dst:
                fdb.delete(kernel, self.index, mac, dst)
                if mac not in wanted:
                    changes.append(f"fdb {mac} removed")
        for mac, dst in wanted.items():
            if have.get(mac) != dst:
                fdb.set_remote(kernel, self.index, mac, dst)
                changes.append(f"fdb {mac} -> {dst} set")
        return changes
