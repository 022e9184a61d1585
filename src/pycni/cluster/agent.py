"""The node agent: lease this node's pod subnet and keep the data path to the others right.

Runs in the node's network namespace, one per node, until stopped:

1. find the underlay link and address, prepare the backend (the VXLAN device: its MAC
   is published with the lease);
2. lease a subnet (its old one when it had one), renewed every TTL/3;
3. write the subnet file for the CNI plugin, enable forwarding, install masquerading;
4. loop: list every lease, program routes (and neighbors, FDB entries) for the other
   nodes, remove those of nodes whose lease is gone. A watch on the leases wakes the loop
   at once; the loop also runs every reconcile interval, so a route removed by hand comes
   back. Stopping leaves the lease to expire (a restarted agent takes it over).
"""

from __future__ import annotations

import ipaddress
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from pycni.cluster import masq
from pycni.cluster import subnet as sn
from pycni.cluster.backend import Backend, Underlay
from pycni.cluster.etcd import Etcd, EtcdError
from pycni.cluster.lease import (
    DEFAULT_PREFIX,
    DEFAULT_TTL,
    Lease,
    LeaseError,
    LeaseInfo,
    LeaseStore,
)
from pycni.net import link, sysctl
from pycni.net.netlink import rtnl

BACKENDS = ("host-gw", "vxlan")
DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
DEFAULT_RECONCILE = 10.0


class AgentError(RuntimeError):
    """The agent cannot start (the message says what to fix)."""


@dataclass
class AgentConfig:
    etcd_endpoint: str
    network: sn.NetworkConfig
    backend: str = "vxlan"
    etcd_prefix: str = DEFAULT_PREFIX
    iface: str = ""
    public_ip: str = ""
    subnet_file: str = DEFAULT_SUBNET_FILE
    ttl: int = DEFAULT_TTL
    reconcile_interval: float = DEFAULT_RECONCILE
    ipmasq: bool = True
    vni: int = 1


def find_underlay(iface: str, public_ip: str) -> Underlay:
    """The link to the other nodes: ``iface``, else the one holding ``public_ip``, else the
    one of the default route, else the first non-loopback link with an IPv4 address."""
    with rtnl() as ipr:
        candidates: list[tuple[str, int, int, list[ipaddress.IPv4Address]]] = []
        for msg in ipr.get_links():
            name = link.name_of(msg)
            index = int(msg["index"])
            v4 = [
                a.ip for a in link.addresses(ipr, index) if isinstance(a.ip, ipaddress.IPv4Address)
            ]
            candidates.append((name, index, link.mtu_of(msg), v4))
        default_oif = 0
        for route in ipr.get_default_routes(family=2):
            default_oif = int(route.get_attr("RTA_OIF") or 0)
            break
    wanted_ip = ipaddress.IPv4Address(public_ip) if public_ip else None
    for name, index, mtu, v4 in candidates:
        if iface and name != iface:
            continue
        if wanted_ip is not None and not iface and wanted_ip not in v4:
            continue
        if not iface and wanted_ip is None and default_oif and index != default_oif:
            continue
        if not iface and wanted_ip is None and not default_oif and (name == "lo" or not v4):
            continue
        address = wanted_ip or (v4[0] if v4 else None)
        if address is None:
            raise AgentError(f"link {name} has no IPv4 address: give --public-ip")
        return Underlay(name, index, address, mtu)
    if iface:
        raise AgentError(f"no link named {iface} in this namespace")
    raise AgentError("no underlay link found: give --iface")


def make_backend(kind: str, underlay: Underlay, vni: int) -> Backend:
    if kind == "host-gw":
        from pycni.cluster.hostgw import HostGateway

        return HostGateway(underlay)
    if kind == "vxlan":
        from pycni.cluster.vxlan import Vxlan

        return Vxlan(underlay, vni)
    raise AgentError(f"unknown backend {kind!r}: choose one of {', '.join(BACKENDS)}")


def previous_subnet(path: str, network: sn.NetworkConfig) -> sn.Net | None:
    """The subnet this node had before (from its subnet file), if it fits the network."""
    try:
        env = sn.read_subnet_env(path)
    except (OSError, sn.SubnetError):
        return None
    return env.subnet if network.contains(env.subnet) else None


@dataclass
class Agent:
    config: AgentConfig
    log_to: TextIO = field(default_factory=lambda: sys.stderr)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.etcd = Etcd(self.config.etcd_endpoint)
        self.store = LeaseStore(self.etcd, self.config.etcd_prefix)
        self.wake = threading.Event()
        self.lease: Lease | None = None
        self._watch_lock = threading.Lock()
        self._watch: object | None = None

    def log(self, message: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self.log_to.write(f"{stamp} agent[{os.getpid()}] {message}\n")
        self.log_to.flush()

    # --- start ----------------------------------------------------------------------------------

    def _wait_for_etcd(self) -> sn.NetworkConfig:
        while not self.stop.is_set():
            try:
                return self.store.ensure_config(self.config.network)
            except EtcdError as exc:
                self.log(f"waiting for etcd: {exc}")
                self.stop.wait(1.0)
        raise AgentError("stopped before etcd answered")

    def _acquire(self, info: LeaseInfo, previous: sn.Net | None) -> Lease:
        while True:
            try:
                return self.store.acquire(self.config.network, info, self.config.ttl, previous)
            except LeaseError as exc:
                raise AgentError(f"cannot lease a subnet: {exc}") from None
            except EtcdError as exc:
                if self.stop.is_set():
                    raise AgentError(f"stopped while leasing: {exc}") from None
                self.log(f"lease failed, retrying: {exc}")
                self.stop.wait(1.0)

    def _publish_local(self, backend: Backend, lease: Lease) -> None:
        backend.configure(lease.subnet)
        env = sn.SubnetEnv(
            self.config.network.network, lease.subnet, backend.pod_mtu(), self.config.ipmasq
        )
        sn.write_subnet_env(self.config.subnet_file, env)

    def run(self) -> int:
        cfg = self.config
        underlay = find_underlay(cfg.iface, cfg.public_ip)
        backend = make_backend(cfg.backend, underlay, cfg.vni)
        info = LeaseInfo(underlay.address, backend.type_name, backend.backend_data())
        self.log(
            f"underlay {underlay.ifname} {underlay.address} mtu {underlay.mtu}; "
            f"backend {backend.type_name}; etcd {cfg.etcd_endpoint}"
        )
        self._wait_for_etcd()
        lease = self._acquire(info, previous_subnet(cfg.subnet_file, cfg.network))
        self.lease = lease
        self.log(f"leased {lease.subnet} (lease {lease.lease_id:x}, ttl {lease.ttl}s)")
        sysctl.enable_forwarding(4)
        self._publish_local(backend, lease)
        if cfg.ipmasq:
            masq.ensure(cfg.network.network)
        watcher = threading.Thread(target=self._watch_loop, name="lease-watch", daemon=True)
        watcher.start()
        renew_every = max(cfg.ttl / 3.0, 0.5)
        next_renew = time.monotonic() + renew_every
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_renew:
                lease = self._renew(lease, backend)
                next_renew = now + renew_every
            lease = self._reconcile(lease, backend)
            timeout = min(cfg.reconcile_interval, max(next_renew - time.monotonic(), 0.05))
            self.wake.wait(timeout)
            self.wake.clear()
        self._close_watch()
        self.log("stopped (the lease stays until its TTL runs out)")
        return 0

    # --- loop -----------------------------------------------------------------------------------

    def _renew(self, lease: Lease, backend: Backend) -> Lease:
        try:
            if self.store.renew(lease):
                return lease
        except EtcdError as exc:
            self.log(f"renew failed (will retry): {exc}")
            return lease
        self.log(f"lease on {lease.subnet} was lost; leasing again")
        info = LeaseInfo(lease.info.public_ip, backend.type_name, backend.backend_data())
        try:
            new = self.store.acquire(self.config.network, info, self.config.ttl, lease.subnet)
        except (LeaseError, EtcdError) as exc:
            self.log(f"could not lease again (will retry): {exc}")
            return lease
        if new.subnet != lease.subnet:
            self.log(f"now leased {new.subnet}")
        self._publish_local(backend, new)
        self.lease = new
        return new

    def _reconcile(self, lease: Lease, backend: Backend) -> Lease:
        try:
            data = backend.backend_data()
            if data != lease.info.backend_data:
                lease = self.store.publish(
                    lease, LeaseInfo(lease.info.public_ip, lease.info.backend_type, data)
                )
                self.lease = lease
                self.log(f"published new backend data {data}")
            leases, _rev = self.store.list()
        except EtcdError as exc:
            self.log(f"cannot list leases (keeping the data path as is): {exc}")
            return lease
        remotes = {s: info for s, (info, _kv) in leases.items() if s != lease.subnet}
        try:
            changes = backend.sync(lease.subnet, remotes)
            if self.config.ipmasq and masq.ensure(self.config.network.network):
                changes.append("masquerade rules restored")
        except Exception as exc:  # a kernel hiccup must not kill the agent
            self.log(f"sync failed (will retry): {type(exc).__name__}: {exc}")
            return lease
        for change in changes:
            self.log(change)
        return lease

    def _watch_loop(self) -> None:
        while not self.stop.is_set():
            try:
                _leases, revision = self.store.list()
                watch = self.etcd.watch_prefix(self.store.subnets_prefix, revision + 1)
                with self._watch_lock:
                    self._watch = watch
                if self.stop.is_set():
                    return
                watch.run(lambda _events: self.wake.set())
            except EtcdError:
                pass
            self.wake.set()  # whatever happened while we were not watching: look again
            self.stop.wait(1.0)

    def _close_watch(self) -> None:
        with self._watch_lock:
            watch = self._watch
        close = getattr(watch, "close", None)
        if close is not None:
            close()
