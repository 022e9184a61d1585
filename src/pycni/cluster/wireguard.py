"""wireguard: an encrypted tunnel device per address family; per remote node a WireGuard
peer and a route, as flannel's wireguard backend (its default "separate" mode).

For a remote subnet 10.244.2.0/24 of a node at underlay address u publishing key K::

    peer   K  endpoint u:<its ListenPort>  allowed-ips 10.244.2.0/24  keepalive N
    route  10.244.2.0/24 dev pycni-wg            (WireGuard picks the peer by allowed-ips)

The lease publishes ``{"PublicKey": K, "ListenPort": port}`` (flannel publishes the key alone
and every node listens on the same port: a lease without ListenPort gets ours). The
private key is made once per node and kept in a 0600 file (``wgkey``). The device carries
the node subnet's network address alone; pods get the underlay's MTU less 60 bytes over
IPv4 (outer IPv4 20 + UDP 8 + WireGuard 32) and 80 over IPv6 (a 40-byte outer header).
The kernel's WireGuard is configured over generic netlink (``wgnl``).
"""

from __future__ import annotations

from typing import Any

from pycni.cluster import tunnel, wgkey, wgnl
from pycni.cluster.backend import Applied, Underlay, guarded, sync_routes, update_routes
from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.net import owned_routes
from pycni.net import vxlan as vxdev
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import Kernel

TYPE = "wireguard"
DEFAULT_PORT = 51820
DEFAULT_PORT_V6 = 51821
OVERHEAD = 60  # outer IPv4 (20) + UDP (8) + WireGuard header and tag (32)
OVERHEAD_V6 = 80


def device_name(version: int) -> str:
    return "pycni-wg-v6" if version == 6 else "pycni-wg"


def overhead(version: int) -> int:
    return OVERHEAD_V6 if version == 6 else OVERHEAD


def _lease_key(info: LeaseInfo) -> bytes | None:
    """The lease's WireGuard public key (None: missing or not a key)."""
    text = info.backend_data.get("PublicKey")
    if not isinstance(text, str):
        return None
    try:
        return wgkey.decode_canonical(text)
    except wgkey.WgKeyError:
        return None


def _lease_port(info: LeaseInfo, default: int) -> int | None:
    """The lease's ListenPort (``default`` when it names none; None when it is bad)."""
    port = info.backend_data.get("ListenPort", default)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return None
    return port


class WireGuard:
    type_name = TYPE

    def __init__(
        self, underlay: Underlay, private_key: bytes, port: int = 0, keepalive: int = 0
    ) -> None:
        self.underlay = underlay
        self.private_key = private_key
        self.public_key = wgkey.public_key(private_key)
        self.port = port or (DEFAULT_PORT_V6 if underlay.version == 6 else DEFAULT_PORT)
        self.keepalive = keepalive
        self.name = device_name(underlay.version)
        self._mtu = underlay.mtu - overhead(underlay.version)
        self.index = 0

    def claims(self, info: LeaseInfo) -> set[str]:
        """The key's bytes, not its spelling: base64 has 8 spellings of each key."""
        key = info.backend_data.get("PublicKey")
        if not isinstance(key, str):
            return set()
        try:
            return {f"PublicKey {wgkey.encode(wgkey.decode(key))}"}
        except wgkey.WgKeyError:
            return {f"PublicKey {key}"}

    def backend_data(self) -> dict[str, Any]:
        return {"PublicKey": wgkey.encode(self.public_key), "ListenPort": self.port}

    def pod_mtu(self) -> int:
        return self._mtu

    def set_pod_mtu(self, mtu: int) -> None:
        self._mtu = mtu

    def _ensure_device(self, kernel: Kernel, own: Net) -> bool:
        """The device, keyed and listening; True when it had to be made."""
        before = self.index
        found = tunnel.ensure(kernel, self.name, TYPE, self._mtu)
        self.index = found.index
        with wgnl.Client() as wg:
            device = wg.device(self.index)
            if device.public_key != self.public_key or device.listen_port != self.port:
                wg.set(self.index, private_key=self.private_key, listen_port=self.port)
        vxdev.ensure_address(kernel, self.index, tunnel.own_address(own))
        return before != 0 and before != self.index

    def configure(self, own: Net) -> None:
        with rtnl() as kernel:
            self._ensure_device(kernel, own)

    def _peers(self, own: Net, remotes: dict[Net, LeaseInfo]) -> dict[Net, wgnl.Peer]:
        out: dict[Net, wgnl.Peer] = {}
        for subnet, info in remotes.items():
            key, port = _lease_key(info), _lease_port(info, self.port)
            if (
                subnet == own
                or info.backend_type != TYPE
                or key is None
                or port is None
                or key == self.public_key
                or info.public_ip == self.underlay.address
                or not subnet.version == info.public_ip.version == self.underlay.version
            ):
                continue
            out[subnet] = wgnl.Peer(key, (info.public_ip, port), (subnet,), self.keepalive)
        return out

    def _routes(self, peers: dict[Net, wgnl.Peer]) -> dict[Net, owned_routes.OwnedRoute]:
        return {s: owned_routes.OwnedRoute(s, None, self.index) for s in peers}

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> Applied:
        applied = Applied()
        with rtnl() as kernel:
            if self._ensure_device(kernel, own):
                applied.changes.append(f"device {self.name} recreated")
            peers = self._peers(own, remotes)
            with wgnl.Client() as wg:
                have = wg.device(self.index).peers
                for subnet, peer in peers.items():
                    if have.get(peer.public_key) != peer:
                        self._set_peer(wg, subnet, peer, applied)
                keep = {p.public_key for s, p in peers.items() if s not in applied.failed}
                for key in have.keys() - keep:
                    self._remove_peer(wg, key, applied)
            family = owned_routes.family_of(self.underlay.version)
            sync_routes(kernel, self._routes(peers), family, applied)
            with wgnl.Client() as wg:  # a peer whose route failed goes too
                for subnet in applied.failed.keys() & peers.keys():
                    self._remove_peer(wg, peers[subnet].public_key, Applied())
        return applied

    def _set_peer(self, wg: wgnl.Client, subnet: Net, peer: wgnl.Peer, applied: Applied) -> None:
        if guarded(applied, subnet, lambda: wg.set_peer(self.index, peer), "the WireGuard peer"):
            assert peer.endpoint is not None
            address, port = peer.endpoint
            applied.changes.append(
                f"peer {wgkey.encode(peer.public_key)} endpoint {address}:{port} "
                f"allowed {subnet} set"
            )

    def _remove_peer(self, wg: wgnl.Client, key: bytes, applied: Applied) -> None:
        try:
            wg.remove_peer(self.index, key)
        except OSError as exc:
            applied.changes.append(f"peer {wgkey.encode(key)} could not be removed: {exc}")
            return
        applied.changes.append(f"peer {wgkey.encode(key)} removed")

    def update(
        self, own: Net, before: dict[Net, LeaseInfo], after: dict[Net, LeaseInfo]
    ) -> Applied:
        applied = Applied()
        old, new = self._peers(own, before), self._peers(own, after)
        if old == new:
            return applied
        with rtnl() as kernel, wgnl.Client() as wg:
            kept = {p.public_key for p in new.values()}
            for peer in old.values():
                if peer.public_key not in kept:
                    self._remove_peer(wg, peer.public_key, applied)
            for subnet, peer in new.items():
                if old.get(subnet) != peer:
                    self._set_peer(wg, subnet, peer, applied)
            update_routes(kernel, self._routes(old), self._routes(new), applied)
            for subnet in applied.failed.keys() & new.keys():
                self._remove_peer(wg, new[subnet].public_key, Applied())
                update_routes(kernel, self._routes({subnet: new[subnet]}), {}, Applied())
        return applied


def keyed(underlay: Underlay, key_file: str, port: int, keepalive: int) -> WireGuard:
    """The backend with the node's key from ``key_file`` (made on first use)."""
    return WireGuard(underlay, wgkey.load_or_create(key_file), port, keepalive)
