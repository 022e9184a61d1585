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

from pycni.cluster import masq, validate
from pycni.cluster import subnet as sn
from pycni.cluster.backend import Backend, Underlay
from pycni.cluster.etcd import Etcd, EtcdCredentials, EtcdError, KeyValue
from pycni.cluster.lease import (
    DEFAULT_PREFIX,
    DEFAULT_TTL,
    Lease,
    LeaseError,
    LeaseInfo,
    LeaseStore,
)
from pycni.net import link, owned_routes, sysctl
from pycni.net.netlink import rtnl

BACKENDS = ("host-gw", "vxlan")
DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
DEFAULT_RECONCILE = 10.0


class AgentError(RuntimeError):
    """The agent cannot start (the message says what to fix)."""


@dataclass
class AgentConfig:
    etcd_endpoints: str  # comma-separated http(s)://HOST:PORT
    network: sn.NetworkConfig
    etcd_credentials: EtcdCredentials = field(default_factory=EtcdCredentials)
    backend: str = "vxlan"
    etcd_prefix: str = DEFAULT_PREFIX
    iface: str = ""
    public_ip: str = ""
    subnet_file: str = DEFAULT_SUBNET_FILE
    ttl: int = DEFAULT_TTL
    reconcile_interval: float = DEFAULT_RECONCILE
    ipmasq: bool = True
    vni: int = 1
    mtu: int = 0  # pod MTU; 0: the underlay's minus the backend's overhead


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


def make_backend(kind: str, underlay: Underlay, vni: int, mtu: int = 0) -> Backend:
    """The backend ``kind``; ``mtu`` overrides its pod MTU (it may not exceed what the
    underlay carries after the backend's overhead)."""
    backend: Backend
    if kind == "host-gw":
        from pycni.cluster.hostgw import HostGateway

        backend = HostGateway(underlay)
    elif kind == "vxlan":
        from pycni.cluster.vxlan import Vxlan

        backend = Vxlan(underlay, vni)
    else:
        raise AgentError(f"unknown backend {kind!r}: choose one of {', '.join(BACKENDS)}")
    if mtu:
        limit = backend.pod_mtu()
        if not 576 <= mtu <= limit:
            raise AgentError(
                f"--mtu {mtu}: {kind} over {underlay.ifname} (mtu {underlay.mtu}) carries "
                f"at most {limit}; give 576..{limit}"
            )
        backend.set_pod_mtu(mtu)
    return backend


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
        try:
            self.etcd = Etcd(self.config.etcd_endpoints, credentials=self.config.etcd_credentials)
        except EtcdError as exc:
            raise AgentError(str(exc)) from None
        self.store = LeaseStore(self.etcd, self.config.etcd_prefix)
        self.rejections = validate.Rejections()
        self.underlay: Underlay | None = None
        self._written: sn.SubnetEnv | None = None
        self._renewed_at = 0.0
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

    def _subnet_env(self, backend: Backend, lease: Lease) -> sn.SubnetEnv:
        return sn.SubnetEnv(
            self.config.network.network,
            lease.subnet,
            backend.pod_mtu(),
            self.config.ipmasq,
            fresh_for=self.fresh_for,
        )

    @property
    def fresh_for(self) -> int:
        """How long the subnet file stays valid after a touch: the file is touched every
        loop pass while the lease is held, and a pass comes at least every TTL/3."""
        return int(self.config.ttl + min(self.config.reconcile_interval, self.config.ttl) + 2)

    def _refresh_subnet_file(self, backend: Backend, lease: Lease) -> None:
        """Write the subnet file (the node becomes ready), or touch it while the lease is
        held; an agent that lost its lease lets it go stale."""
        env = self._subnet_env(backend, lease)
        path = self.config.subnet_file
        if env != self._written:
            sn.write_subnet_env(path, env)
            if self._written is None:
                self.log(f"ready: subnet file {path} written (mtu {env.mtu})")
            self._written = env
            return
        if time.monotonic() - self._renewed_at < self.config.ttl:
            try:
                os.utime(path)
            except FileNotFoundError:  # removed by hand: write it again
                sn.write_subnet_env(path, env)
            except OSError as exc:
                self.log(f"cannot refresh {path}: {exc}")

    def run(self) -> int:
        cfg = self.config
        underlay = find_underlay(cfg.iface, cfg.public_ip)
        self.underlay = underlay
        backend = make_backend(cfg.backend, underlay, cfg.vni, cfg.mtu)
        info = LeaseInfo(underlay.address, backend.type_name, backend.backend_data())
        self.log(
            f"underlay {underlay.ifname} {underlay.address} mtu {underlay.mtu}; "
            f"backend {backend.type_name} (pod mtu {backend.pod_mtu()}); "
            f"etcd {', '.join(e.url for e in self.etcd.endpoints)}"
        )
        self._wait_for_etcd()
        lease = self._acquire(info, previous_subnet(cfg.subnet_file, cfg.network))
        self._renewed_at = time.monotonic()
        self.lease = lease
        self.log(f"leased {lease.subnet} (lease {lease.lease_id:x}, ttl {lease.ttl}s)")
        sysctl.enable_forwarding(4)
        backend.configure(lease.subnet)
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
            lease, synced = self._reconcile(lease, backend)
            if synced or self._written is not None:
                self._refresh_subnet_file(backend, lease)
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
                self._renewed_at = time.monotonic()
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
        self._renewed_at = time.monotonic()
        backend.configure(new.subnet)
        self.lease = new
        return new

    def _reconcile(self, lease: Lease, backend: Backend) -> tuple[Lease, bool]:
        """One pass: publish changed backend data, list, check and program the leases.
        Returns the lease and whether the data path now matches etcd."""
        try:
            data = backend.backend_data()
            if data != lease.info.backend_data:
                lease = self.store.publish(
                    lease, LeaseInfo(lease.info.public_ip, lease.info.backend_type, data)
                )
                self.lease = lease
                self.log(f"published new backend data {data}")
            listing = self.store.list_checked()
        except EtcdError as exc:
            self.log(f"cannot list leases (keeping the data path as is): {exc}")
            return lease, False
        try:
            view = self._node_view(lease, backend)
            remotes, rejected = self._checked(listing.leases, lease, view)
            for line in self.rejections.fresh(listing.rejected + rejected):
                self.log(line)
            changes = backend.sync(lease.subnet, remotes)
            if self.config.ipmasq and masq.ensure(self.config.network.network):
                changes.append("masquerade rules restored")
        except Exception as exc:  # a kernel hiccup must not kill the agent
            self.log(f"sync failed (will retry): {type(exc).__name__}: {exc}")
            return lease, False
        for change in changes:
            self.log(change)
        return lease, True

    def _node_view(self, lease: Lease, backend: Backend) -> validate.NodeView:
        """This node's facts every lease is checked against (read fresh each pass)."""
        assert self.underlay is not None
        with rtnl() as ipr:
            underlay_nets = tuple(
                a.network
                for a in link.addresses(ipr, self.underlay.index)
                if isinstance(a.ip, ipaddress.IPv4Address)
            )
            foreign = owned_routes.foreign(ipr)
        return validate.NodeView(
            network=self.config.network,
            own=lease.subnet,
            backend_type=backend.type_name,
            public_ip=self.underlay.address,
            underlay_networks=underlay_nets,
            foreign_routes=tuple(
                (r.dst, r.text)
                for r in foreign
                if r.connected or r.dst.prefixlen >= self.config.network.subnet_len
            ),
            vni=self.config.vni if backend.type_name == "vxlan" else None,
        )

    @staticmethod
    def _checked(
        leases: dict[sn.Net, tuple[LeaseInfo, KeyValue]], lease: Lease, view: validate.NodeView
    ) -> tuple[dict[sn.Net, LeaseInfo], list[tuple[str, int, str]]]:
        """The remote leases safe to route to, and the others with why."""
        remotes: dict[sn.Net, LeaseInfo] = {}
        rejected: list[tuple[str, int, str]] = []
        for subnet, (info, kv) in leases.items():
            if subnet == lease.subnet:
                continue
            problem = validate.lease_problem(subnet, info, view)
            if problem is None:
                remotes[subnet] = info
            else:
                rejected.append((kv.key, kv.mod_revision, problem))
        return remotes, rejected

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
