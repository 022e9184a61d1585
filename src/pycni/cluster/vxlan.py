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
from pycni.cluster.backend import Applied, Underlay, guarded, sync_routes, update_routes
from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.net import fdb, neigh, owned_routes
from pycni.net import vxlan as vxdev
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import Kernel

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

    def claims(self, info: LeaseInfo) -> set[str]:
        """The VTEP MAC as bytes (hex), whatever its spelling: ``validate`` refuses all but
        the canonical one, and the claim holds for every spelling anyway."""
        mac = info.backend_data.get("VtepMAC")
        if not isinstance(mac, str):
            return set()
        parts = mac.strip().split(":")
        try:
            if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
                raise ValueError(mac)
            return {f"VtepMAC {bytes(int(p, 16) for p in parts).hex(':')}"}
        except ValueError:
            return {f"VtepMAC {mac}"}

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> Applied:
        applied = Applied()
        with rtnl() as kernel:
            before = self.index
            self._ensure_device(kernel)
            if self.index != before:
                vxdev.ensure_address(kernel, self.index, _own_address(own))
                applied.changes.append(f"device {self.spec.name} recreated")
            peers = self._peers(own, remotes)
            family = owned_routes.family_of(self.underlay.version)
            have_neigh = {
                a: m.lower() for a, m in neigh.permanent(kernel, self.index, family).items()
            }
            have_fdb = {m.lower(): d for m, d in fdb.remote_entries(kernel, self.index).items()}
            for subnet, peer in peers.items():
                self._set_peer(kernel, subnet, peer, have_neigh, have_fdb, applied)
            sync_routes(kernel, self._routes(peers), family, applied)
            # what no peer (or only a failed one) needs any more
            reached = {s: p for s, p in peers.items() if s not in applied.failed}
            set_neigh = {s.network_address: m for s, (_ip, m) in peers.items()}
            set_fdb = {m: ip for _s, (ip, m) in peers.items()}
            keep_neigh = {s.network_address: m for s, (_ip, m) in reached.items()}
            keep_fdb = {m: ip for _s, (ip, m) in reached.items()}
            for address, mac in {**have_neigh, **set_neigh}.items():
                if keep_neigh.get(address) != mac:
                    self._remove_neighbor(kernel, address, applied)
            for mac, dst in [*have_fdb.items(), *set_fdb.items()]:
                if keep_fdb.get(mac) != dst:
                    self._remove_fdb(kernel, mac, dst, applied)
        return applied

    def _set_peer(
        self,
        kernel: Kernel,
        subnet: Net,
        peer: tuple[Address, str],
        have_neigh: dict[Address, str],
        have_fdb: dict[str, Address],
        applied: Applied,
    ) -> None:
        """The neighbor and FDB entry of one peer (its route comes after)."""
        public, mac = peer
        address = subnet.network_address
        if have_neigh.get(address) != mac:
            step = lambda: neigh.set_permanent(kernel, self.index, address, mac)  # noqa: E731
            if not guarded(applied, subnet, step, "the neighbor entry"):
                return
            applied.changes.append(f"neighbor {address} -> {mac} set")
        old = have_fdb.get(mac)
        if old != public:
            if old is not None:
                self._remove_fdb(kernel, mac, old, applied, quiet=True)
            step = lambda: fdb.set_remote(kernel, self.index, mac, public)  # noqa: E731
            if guarded(applied, subnet, step, "the FDB entry"):
                applied.changes.append(f"fdb {mac} -> {public} set")

    def _remove_neighbor(self, kernel: Kernel, address: Address, applied: Applied) -> None:
        try:
            neigh.delete(kernel, self.index, address)
        except OSError as exc:
            applied.changes.append(f"neighbor {address} could not be removed: {exc}")
            return
        applied.changes.append(f"neighbor {address} removed")

    def _remove_fdb(
        self, kernel: Kernel, mac: str, dst: Address, applied: Applied, *, quiet: bool = False
    ) -> None:
        try:
            fdb.delete(kernel, self.index, mac, dst)
        except OSError as exc:
            applied.changes.append(f"fdb {mac} -> {dst} could not be removed: {exc}")
            return
        if not quiet:
            applied.changes.append(f"fdb {mac} -> {dst} removed")

    def update(
        self, own: Net, before: dict[Net, LeaseInfo], after: dict[Net, LeaseInfo]
    ) -> Applied:
        applied = Applied()
        old, new = self._peers(own, before), self._peers(own, after)
        if old == new:
            return applied
        with rtnl() as kernel:
            old_neigh = {s.network_address: mac for s, (_ip, mac) in old.items()}
            new_neigh = {s.network_address: mac for s, (_ip, mac) in new.items()}
            old_fdb = {mac: public for public, mac in old.values()}
            new_fdb = {mac: public for public, mac in new.values()}
            for address in old_neigh.keys() - new_neigh.keys():
                self._remove_neighbor(kernel, address, applied)
            for mac, dst in old_fdb.items():
                if new_fdb.get(mac) != dst:
                    self._remove_fdb(kernel, mac, dst, applied, quiet=mac in new_fdb)
            kept_fdb = {k: v for k, v in old_fdb.items() if new_fdb.get(k) == v}
            for subnet, peer in new.items():
                if old.get(subnet) != peer:
                    self._set_peer(kernel, subnet, peer, old_neigh, kept_fdb, applied)
            update_routes(kernel, self._routes(old), self._routes(new), applied)
            for subnet in applied.failed:  # a failed peer leaves nothing half-made behind
                if subnet in new:
                    public, mac = new[subnet]
                    self._remove_neighbor(kernel, subnet.network_address, applied)
                    self._remove_fdb(kernel, mac, public, applied, quiet=True)
                    update_routes(kernel, self._routes({subnet: new[subnet]}), {}, Applied())
        return applied

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
