"""The node agent: lease this node's pod subnets and keep the data path to the others right.

Runs in the node's network namespace, one per node, until stopped. Per address family of
the cluster (IPv4, IPv6 or both; each family has its own lease and its own data path over
the underlay address of that family):

1. find the underlay link and address, prepare the backend (the VXLAN device: its MAC
   is published with the lease);
2. lease a subnet (its old one when it had one), renewed every TTL/3;
3. enable forwarding, install masquerading;
4. loop: a full pass lists every lease, checks it (see ``validate``) against the node's
   facts read fresh, makes the routes (and neighbors, FDB entries) to the other nodes
   exactly those and removes the rest; it runs at start, every reconcile interval (so a
   route removed by hand comes back) and whenever the watch had to start again. Between
   full passes a watch on the leases delivers each change with its value: the changed
   lease alone is checked (against the node's facts of the last full pass, read again
   first if a netlink subscription saw an address or a route not the agent's change) and
   only its routes are changed, without listing etcd or reading the kernel's tables, so a
   node joining a cluster of 100 costs each other agent about a millisecond. After the
   first full pass the subnet file is written (the node is ready), then touched every pass
   while the leases are renewed. Stopping leaves the leases to expire (a restarted agent
   takes them over).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import sys
import threading
import time
from typing import TextIO

from pycni.cluster import etcdconf, masq, netconf, validate, wgkey
from pycni.cluster import subnet as sn
from pycni.cluster.backend import Applied, Backend, Underlay
from pycni.cluster.etcd import Etcd, EtcdCredentials, EtcdError, KeyValue, WatchEvent
from pycni.cluster.hostgw import HostGateway
from pycni.cluster.ipip import Ipip
from pycni.cluster.lease import (
    DEFAULT_PREFIX,
    DEFAULT_TTL,
    Lease,
    LeaseError,
    LeaseInfo,
    LeaseStore,
    Listing,
)
from pycni.cluster.tenure import Tenures, Verdict
from pycni.cluster.vxlan import Vxlan
from pycni.cluster.wireguard import keyed
from pycni.net import link, owned_routes, sysctl
from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel_changes import KernelChanges
from pycni.record import field, record, replace

BACKENDS = ("host-gw", "vxlan", "wireguard", "ipip")
DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
DEFAULT_RECONCILE = 10.0
LOCAL_TABLE = 255  # the kernel's table of this node's own and broadcast addresses
RTN_LOCAL = 2
RTN_SPECIAL = (3, 4, 5)  # RTN_BROADCAST, RTN_ANYCAST, RTN_MULTICAST
SETTLE = 0.02  # seconds to let a burst of watch events gather before a pass
MAX_PENDING = 1000  # changed keys held between passes; more: a full pass instead


class AgentError(RuntimeError):
    """The agent cannot start (the message says what to fix)."""


@record
class AgentConfig:
    etcd_endpoints: str  # comma-separated http(s)://HOST:PORT
    network: sn.ClusterConfig | None  # None: etcd's <prefix>/config gives it all (flannel's way)
    etcd_credentials: EtcdCredentials = field(default_factory=EtcdCredentials)
    backend: str = "vxlan"
    etcd_prefix: str = DEFAULT_PREFIX
    iface: str = ""
    public_ip: str = ""
    public_ipv6: str = ""
    subnet_file: str = DEFAULT_SUBNET_FILE
    ttl: int = DEFAULT_TTL
    reconcile_interval: float = DEFAULT_RECONCILE
    ipmasq: bool = True
    vni: int = 1
    vxlan_port: int = 8472  # the kernel's (and flannel's) default
    underlay_mtu: int = 0  # the underlay link's MTU to assume (net-conf's MTU); 0: its own
    mtu: int = 0  # pod MTU; 0: the underlay's minus the backend's overhead
    wireguard_key_file: str = ""  # "": flannel's /run/flannel/wgkey
    wireguard_port: int = 0  # 0: 51820 for IPv4, 51821 for IPv6
    wireguard_keepalive: int = 0  # seconds (0: none, flannel's default)
    network_source: str = "the flags"  # named when etcd's config key disagrees


def _usable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (address.is_link_local or address.is_loopback)


def _find_underlay(iface: str, public_ip: str, version: int = 4) -> Underlay:
    """The link to the other nodes for IPv``version``: ``iface``, else the one holding
    ``public_ip``, else the one of that family's default route, else the first
    non-loopback link with an address of that family (IPv6: not link-local)."""
    family = owned_routes.family_of(version)
    with rtnl() as kernel:
        candidates: list[tuple[str, int, int, list[ipaddress.IPv4Address | ipaddress.IPv6Address]]]
        candidates = []
        for found in kernel.links():
            mine = [
                a.ip
                for a in link.addresses(kernel, found.index)
                if a.version == version and _usable(a.ip)
            ]
            candidates.append((found.name, found.index, found.mtu, mine))
        default_oif = owned_routes.default_oif(kernel, family)
    try:
        wanted_ip = ipaddress.ip_address(public_ip) if public_ip else None
    except ValueError:
        raise AgentError(f"bad --public-ip {public_ip!r}") from None
    if wanted_ip is not None and wanted_ip.version != version:
        raise AgentError(
            f"--public-ip{'v6' if version == 6 else ''} {public_ip} is not IPv{version}"
        )
    for name, index, mtu, addresses in candidates:
        if iface and name != iface:
            continue
        if wanted_ip is not None and not iface and wanted_ip not in addresses:
            continue
        if not iface and wanted_ip is None and default_oif and index != default_oif:
            continue
        if not iface and wanted_ip is None and not default_oif and (name == "lo" or not addresses):
            continue
        address = wanted_ip or (addresses[0] if addresses else None)
        if address is None:
            flag = "--public-ipv6" if version == 6 else "--public-ip"
            raise AgentError(f"link {name} has no IPv{version} address: give {flag}")
        return Underlay(name, index, address, mtu)
    if iface:
        raise AgentError(f"no link named {iface} in this namespace")
    raise AgentError(f"no IPv{version} underlay link found: give --iface")


def make_backend(
    kind: str,
    underlay: Underlay,
    vni: int,
    mtu: int = 0,
    *,
    wg_key_file: str = "",
    wg_port: int = 0,
    wg_keepalive: int = 0,
    vxlan_port: int = 8472,
) -> Backend:
    """The backend ``kind``; ``mtu`` overrides its pod MTU (it may not exceed what the
    underlay carries after the backend's overhead)."""
    backend: Backend
    if kind == "host-gw":
        backend = HostGateway(underlay)
    elif kind == "vxlan":
        backend = Vxlan(underlay, vni, vxlan_port)
    elif kind == "wireguard":
        try:
            key_file = wg_key_file or wgkey.DEFAULT_KEY_FILE
            backend = keyed(underlay, key_file, wg_port, wg_keepalive)
        except wgkey.WgKeyError as exc:
            raise AgentError(str(exc)) from None
    elif kind == "ipip":
        if underlay.version != 4:
            raise AgentError("the ipip backend carries IPv4 only: use wireguard or vxlan for IPv6")
        backend = Ipip(underlay)
    else:
        raise AgentError(f"unknown backend {kind!r}: choose one of {', '.join(BACKENDS)}")
    if mtu:
        limit = backend.pod_mtu()
        low = 1280 if underlay.version == 6 else 576
        if not low <= mtu <= limit:
            raise AgentError(
                f"--mtu {mtu}: {kind} over {underlay.ifname} (mtu {underlay.mtu}, "
                f"IPv{underlay.version}) carries at most {limit}; give {low}..{limit}"
            )
        backend.set_pod_mtu(mtu)
    return backend


def _previous_subnets(path: str) -> list[sn.Net]:
    """The subnets this node had before (from its subnet file)."""
    try:
        env = sn.read_subnet_env(path)
    except (OSError, sn.SubnetError):
        return []
    return [subnet for _network, subnet in env.pairs]


@record
class FamilyPath:
    """One address family's part of the node: its network, underlay, backend and lease."""

    network: sn.NetworkConfig
    underlay: Underlay
    backend: Backend
    lease: Lease | None = None
    renewed_at: float = 0.0
    view: validate.NodeView | None = None  # the node's facts at the last full pass
    remotes: dict[sn.Net, LeaseInfo] = field(default_factory=dict)  # what the data path reaches
    kvs: dict[sn.Net, KeyValue] = field(default_factory=dict)  # the etcd version of each remote

    @property
    def version(self) -> int:
        return self.network.version


@record
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
        self.tenures = Tenures(self._lease_alive, self.config.ttl)
        self.paths: list[FamilyPath] = []
        self._written: sn.SubnetEnv | None = None
        self.wake = threading.Event()
        self._watch_lock = threading.Lock()
        self._watch: object | None = None
        self._pending: dict[str, WatchEvent] = {}  # the latest change per key (guarded)
        self._full_wanted = True  # a full pass is due (guarded by _watch_lock)
        self._listed_revision = 0
        self._skipped = 0  # keys naming no subnet the last listing skipped (logged on change)
        self._kernel: KernelChanges | None = None  # did the node's facts change since read?
        # per IP version: the node facts of the last full pass and each key's verdict then
        self._verdicts: dict[int, tuple[validate.NodeView, dict[str, tuple[int, str | None]]]] = {}

    @property
    def lease(self) -> Lease | None:
        """The first family's lease (IPv4 on a dual-stack node)."""
        return self.paths[0].lease if self.paths else None

    def log(self, message: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self.log_to.write(f"{stamp} agent[{os.getpid()}] {message}\n")
        self.log_to.flush()

    # --- start ----------------------------------------------------------------------------------

    def net_conf(self) -> netconf.NetConf:
        """The network and backend settings of the config, as a net-conf says them."""
        cfg = self.config
        assert cfg.network is not None
        return netconf.NetConf(
            cfg.network,
            cfg.backend,
            cfg.vni,
            cfg.vxlan_port,
            cfg.underlay_mtu,
            cfg.wireguard_port,
            cfg.wireguard_keepalive,
        )

    def _take_etcd_config(self) -> None:
        """No network given: wait for etcd's config key, as flanneld's etcd mode does, and
        take the network and backend from it."""
        key = self.store.config_key
        waiting = ""
        while not self.stop.is_set():
            try:
                conf = etcdconf.read(self.etcd, key)
            except etcdconf.ConfigError as exc:
                raise AgentError("\n".join(exc.problems)) from None
            except (EtcdError, etcdconf.ConfigMissing) as exc:
                why = f"etcd: {exc}" if isinstance(exc, EtcdError) else f"{key} to be written"
                if why != waiting:
                    self.log(f"waiting for {why}")
                    waiting = why
                self.stop.wait(1.0)
                continue
            for warning in conf.warnings:
                self.log(f"warning: {key}: {warning}")
            self.config = replace(
                self.config,
                network=conf.network,
                backend=conf.backend,
                vni=conf.vni,
                vxlan_port=conf.vxlan_port,
                underlay_mtu=conf.underlay_mtu,
                wireguard_port=conf.wireguard_port,
                wireguard_keepalive=conf.wireguard_keepalive,
                network_source=f"etcd's {key} when the agent started",
            )
            self.log(f"cluster config from {key}: {conf.network.describe()}, {conf.backend}")
            return
        raise AgentError("stopped before etcd gave the cluster config")

    def _wait_for_etcd(self) -> None:
        while not self.stop.is_set():
            try:
                key, source = self.store.config_key, self.config.network_source
                etcdconf.ensure(self.etcd, key, self.net_conf(), source)
                return
            except etcdconf.ConfigError as exc:
                raise AgentError("\n".join(exc.problems)) from None
            except EtcdError as exc:
                self.log(f"waiting for etcd: {exc}")
                self.stop.wait(1.0)
        raise AgentError("stopped before etcd answered")

    def _acquire(self, path: FamilyPath, info: LeaseInfo, previous: sn.Net | None) -> Lease:
        while True:
            try:
                return self.store.acquire(path.network, info, self.config.ttl, previous)
            except LeaseError as exc:
                raise AgentError(f"cannot lease an IPv{path.version} subnet: {exc}") from None
            except EtcdError as exc:
                if self.stop.is_set():
                    raise AgentError(f"stopped while leasing: {exc}") from None
                self.log(f"lease failed, retrying: {exc}")
                self.stop.wait(1.0)

    def pod_mtu(self) -> int:
        """One MTU for pods: the smallest any family's data path carries."""
        return min(p.backend.pod_mtu() for p in self.paths)

    def _subnet_env(self) -> sn.SubnetEnv:
        by_version = {p.version: p for p in self.paths if p.lease is not None}
        v4, v6 = by_version.get(4), by_version.get(6)
        return sn.SubnetEnv(
            v4.network.network if v4 else None,
            v4.lease.subnet if v4 and v4.lease else None,
            self.pod_mtu(),
            self.config.ipmasq,
            fresh_for=self.fresh_for,
            ipv6_network=v6.network.network if v6 else None,
            ipv6_subnet=v6.lease.subnet if v6 and v6.lease else None,
        )

    @property
    def fresh_for(self) -> int:
        """How long the subnet file stays valid after a touch: the file is touched every
        loop pass while the leases are held, and a pass comes at least every TTL/3."""
        return int(self.config.ttl + min(self.config.reconcile_interval, self.config.ttl) + 2)

    def _refresh_subnet_file(self) -> None:
        """Write the subnet file (the node becomes ready), or touch it while every lease is
        renewed; an agent that lost a lease lets it go stale."""
        env = self._subnet_env()
        file = self.config.subnet_file
        if env != self._written:
            sn.write_subnet_env(file, env)
            if self._written is None:
                self.log(f"ready: subnet file {file} written (mtu {env.mtu})")
            self._written = env
            return
        now = time.monotonic()
        if all(now - p.renewed_at < self.config.ttl for p in self.paths):
            try:
                os.utime(file)
            except FileNotFoundError:  # removed by hand: write it again
                sn.write_subnet_env(file, env)
            except OSError as exc:
                self.log(f"cannot refresh {file}: {exc}")

    def _prepare(self) -> None:
        cfg = self.config
        assert cfg.network is not None  # taken from etcd first when not given
        for network in cfg.network.families:
            public = cfg.public_ipv6 if network.version == 6 else cfg.public_ip
            underlay = _find_underlay(cfg.iface, public, network.version)
            if cfg.underlay_mtu:
                underlay = replace(underlay, mtu=cfg.underlay_mtu)
            backend = make_backend(
                cfg.backend,
                underlay,
                cfg.vni,
                cfg.mtu,
                wg_key_file=cfg.wireguard_key_file,
                wg_port=cfg.wireguard_port,
                wg_keepalive=cfg.wireguard_keepalive,
                vxlan_port=cfg.vxlan_port,
            )
            self.paths.append(FamilyPath(network, underlay, backend))
            self.log(
                f"IPv{network.version} {network.network}: underlay {underlay.ifname} "
                f"{underlay.address} mtu {underlay.mtu}; backend {backend.type_name} "
                f"(pod mtu {backend.pod_mtu()})"
            )

    def run(self) -> int:
        try:
            return self._run()
        finally:
            if self._kernel is not None:
                self._kernel.close()

    def _enable_forwarding(self, version: int) -> None:
        """Turn the node's forwarding on, as flannel's pods need it to reach other nodes.

        A container that is not privileged sees /proc/sys read-only (the manifest's agent is
        one): then the agent says so and goes on, as the node is not broken by it. The first
        pod's ADD turns forwarding on (the bridge plugin with isGateway, which the flannel
        plugin sets, run by the daemon in the host's mount namespace), or the operator does."""
        name = "net.ipv4.ip_forward" if version == 4 else "net.ipv6.conf.all.forwarding"
        try:
            with rtnl() as kernel:
                sysctl.enable_forwarding(kernel, sysctl.THREAD, version)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            self.log(
                f"warning: {name} is off and cannot be set from here ({e.strerror}): the first"
                f" pod's ADD turns it on (bridge isGateway); to have it before, set {name}=1"
                " on the node (sysctl -w) or run the agent privileged"
            )

    def _run(self) -> int:
        if self.config.network is None:
            self._take_etcd_config()
        cfg = self.config
        self._prepare()
        self._kernel = KernelChanges(owned_routes.PROTO_PYCNI)
        self.log(f"etcd {', '.join(e.url for e in self.etcd.endpoints)}")
        self._wait_for_etcd()
        previous = _previous_subnets(cfg.subnet_file)
        for path in self.paths:
            info = LeaseInfo(
                path.underlay.address, path.backend.type_name, path.backend.backend_data()
            )
            before = next((s for s in previous if path.network.contains(s)), None)
            path.lease = self._acquire(path, info, before)
            path.renewed_at = time.monotonic()
            lease = path.lease
            self.log(f"leased {lease.subnet} (lease {lease.lease_id:x}, ttl {lease.ttl}s)")
            self._enable_forwarding(path.version)
            path.backend.configure(lease.subnet)
            if cfg.ipmasq:
                masq.ensure(path.network.network)
        watcher = threading.Thread(target=self._watch_loop, name="lease-watch", daemon=True)
        watcher.start()
        renew_every = max(cfg.ttl / 3.0, 0.5)
        next_renew = time.monotonic() + renew_every
        next_full = 0.0
        forced_at: float | None = None  # the hold expiry a full pass was last forced for
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_renew:
                for path in self.paths:
                    self._renew(path)
                next_renew = now + renew_every
            events, full = self._take_events()
            synced = False
            expiry = self.tenures.next_expiry()  # a deleted key's hold ends: its route goes
            if expiry is not None and now >= expiry and expiry != forced_at:
                next_full, forced_at = 0.0, expiry  # once per expiry (etcd may be down)
            if full or now >= next_full or any(p.view is None for p in self.paths):
                synced = self._reconcile()
                next_full = now + cfg.reconcile_interval
            # A change the last listing already held is done (an older one would undo it).
            events = {k: e for k, e in events.items() if e.revision > self._listed_revision}
            if events and all(p.view is not None for p in self.paths):
                synced = self._apply_events(events)
                if not synced:
                    next_full = 0.0  # something went wrong: look at everything
            if synced or self._written is not None:
                self._refresh_subnet_file()
            expiry = self.tenures.next_expiry()
            if expiry is None or expiry == forced_at:
                expiry = next_full
            due = min(next_full, next_renew, expiry) - time.monotonic()
            timeout = min(cfg.reconcile_interval, max(due, 0.05))
            if self.wake.wait(timeout) and not self.stop.is_set():
                self.stop.wait(SETTLE)  # a burst of lease changes: one pass for all of it
            self.wake.clear()
        self._close_watch()
        self.log("stopped (the leases stay until their TTL runs out)")
        return 0

    # --- loop -----------------------------------------------------------------------------------

    def _renew(self, path: FamilyPath) -> None:
        lease = path.lease
        assert lease is not None
        try:
            status = self.store.renew(lease)
        except EtcdError as exc:
            self.log(f"renew failed (will retry): {exc}")
            return
        if status != "lost":
            path.renewed_at = time.monotonic()
            if status == "restored":
                self.log(
                    f"the key of {lease.subnet} was written over or deleted by someone else "
                    f"while our lease {lease.lease_id:x} lives: restored"
                )
            return
        self.log(f"lease on {lease.subnet} was lost; leasing again")
        info = LeaseInfo(lease.info.public_ip, path.backend.type_name, path.backend.backend_data())
        try:
            new = self.store.acquire(path.network, info, self.config.ttl, lease.subnet)
        except (LeaseError, EtcdError) as exc:
            self.log(f"could not lease again (will retry): {exc}")
            return
        if new.subnet != lease.subnet:
            self.log(f"now leased {new.subnet}")
        path.renewed_at = time.monotonic()
        path.backend.configure(new.subnet)
        path.lease = new
        path.view = None  # its own subnet is part of the facts: a full pass next

    def _reconcile(self) -> bool:
        """One pass: publish changed backend data, list, check and program the leases.
        Returns whether the data path now matches etcd."""
        try:
            for path in self.paths:
                lease = path.lease
                assert lease is not None
                data = path.backend.backend_data()
                if data != lease.info.backend_data:
                    info = LeaseInfo(lease.info.public_ip, lease.info.backend_type, data)
                    path.lease = self.store.publish(lease, info)
                    self.log(f"published new backend data {data}")
            listing = self.store.list_checked()
        except EtcdError as exc:
            self.log(f"cannot list leases (keeping the data path as is): {exc}")
            return False
        self._listed_revision = listing.revision
        if listing.skipped != self._skipped:
            self._skipped = listing.skipped
            self.log(f"{listing.skipped} keys under the prefix name no subnet: skipped unread")
        own = {p.lease.subnet for p in self.paths if p.lease is not None}
        rejected = list(listing.rejected)
        leases = self._held(listing, own, rejected)
        changes: list[str] = []
        try:
            if self._kernel is not None:
                self._kernel.changed()  # the facts are read now: older changes are in them
            views = [self._node_view(path) for path in self.paths]
            for path, view in zip(self.paths, views, strict=True):
                lease = path.lease
                assert lease is not None
                mine = {s: v for s, v in leases.items() if s.version == path.version}
                remotes, bad = self._checked(mine, own, view)
                rejected += bad
                kvs = {s: mine[s][1] for s in remotes}
                remotes = self._exclusive(path, remotes, kvs, rejected)
                path.view, path.remotes = None, {}  # until the sync is through
                applied = path.backend.sync(lease.subnet, remotes)
                changes += applied.changes
                self._failed(applied, kvs, remotes, rejected)
                path.view, path.remotes, path.kvs = view, remotes, kvs
                if self.config.ipmasq and masq.ensure(path.network.network):
                    changes.append(f"IPv{path.version} masquerade rules restored")
            versions = {p.version for p in self.paths}
            for subnet, (_info, kv) in listing.leases.items():
                if subnet.version not in versions:
                    reason = f"an IPv{subnet.version} subnet, and this cluster has no such network"
                    rejected.append((kv.key, kv.mod_revision, reason))
        except Exception as exc:  # a kernel hiccup must not kill the agent
            self.log(f"sync failed (will retry): {type(exc).__name__}: {exc}")
            return False
        for line in self.rejections.fresh(rejected):
            self.log(line)
        for change in changes:
            self.log(change)
        return True

    def _lease_alive(self, lease: int) -> bool:
        """Whether etcd still has ``lease`` (when etcd cannot say: yes, so a key does not
        change hands on a hiccup)."""
        try:
            return self.etcd.time_to_live(lease) >= 0
        except EtcdError as exc:
            self.log(f"cannot ask etcd about lease {lease:x} (taken as alive): {exc}")
            return True

    def _subnet_of(self, key: str) -> sn.Net | None:
        named = sn.subnet_of_key(key)
        return named if named is not None and key == self.store.key(named) else None

    def _held(
        self, listing: Listing, own: set[sn.Net], rejected: list[tuple[str, int, str]]
    ) -> dict[sn.Net, tuple[LeaseInfo, KeyValue]]:
        """What each remote key is routed by (see ``tenure``): etcd's version, or the one
        before while that one's etcd lease lives and the new one is not its renewal."""
        self.tenures.new_pass()
        out: dict[sn.Net, tuple[LeaseInfo, KeyValue]] = {}
        seen: set[str] = set()
        for subnet, (info, kv) in listing.leases.items():
            seen.add(kv.key)
            if subnet in own:
                self.tenures.forget(kv.key)
                continue
            verdict = self.tenures.judge(kv, info)
            if verdict.refused is not None:
                rejected.append((kv.key, kv.mod_revision, verdict.refused))
            self._keep(out, subnet, verdict)
        for key in [k for k in self.tenures.held if k not in seen]:
            verdict = self.tenures.vanished(key)  # deleted, or now malformed
            held = self._subnet_of(key)
            if held is not None and held not in own:
                self._keep(out, held, verdict)
        return out

    @staticmethod
    def _keep(
        out: dict[sn.Net, tuple[LeaseInfo, KeyValue]], subnet: sn.Net, verdict: Verdict
    ) -> None:
        if verdict.info is not None and verdict.kv is not None:
            out[subnet] = (verdict.info, verdict.kv)

    def _exclusive(
        self,
        path: FamilyPath,
        remotes: dict[sn.Net, LeaseInfo],
        kvs: dict[sn.Net, KeyValue],
        rejected: list[tuple[str, int, str]],
    ) -> dict[sn.Net, LeaseInfo]:
        """``remotes`` less the leases claiming what an older one (or this node) claims."""
        assert path.lease is not None
        created = {s: kv.create_revision for s, kv in kvs.items()}
        own_claims = path.backend.claims(path.lease.info)
        kept, refused = validate.exclusive(remotes, created, path.backend.claims, own_claims)
        for subnet, why in refused.items():
            kv = kvs.pop(subnet)
            rejected.append((kv.key, kv.mod_revision, why))
        return kept

    @staticmethod
    def _failed(
        applied: Applied,
        kvs: dict[sn.Net, KeyValue],
        remotes: dict[sn.Net, LeaseInfo],
        rejected: list[tuple[str, int, str]],
    ) -> None:
        """Peers the kernel refused: reported (once per version) and out of ``remotes``
        (the next full pass tries them again)."""
        for subnet, why in applied.failed.items():
            remotes.pop(subnet, None)
            kv = kvs.pop(subnet, None)
            if kv is not None:
                rejected.append((kv.key, kv.mod_revision, why))

    def _node_view(self, path: FamilyPath) -> validate.NodeView:
        """This node's facts every lease of the family is checked against (read fresh)."""
        assert path.lease is not None
        family = owned_routes.family_of(path.version)
        with rtnl() as kernel:
            underlay_nets = tuple(
                a.network
                for a in link.addresses(kernel, path.underlay.index)
                if a.version == path.version and not a.ip.is_link_local
            )
            foreign = owned_routes.foreign(kernel, family=family)
            local = kernel.routes(family, table=LOCAL_TABLE)
        return validate.NodeView(
            network=path.network,
            own=path.lease.subnet,
            backend_type=path.backend.type_name,
            public_ip=path.underlay.address,
            underlay_networks=underlay_nets,
            foreign_routes=tuple(
                (r.dst, r.text)
                for r in foreign
                if r.connected or r.dst.prefixlen >= path.network.subnet_len
            ),
            vni=self.config.vni if path.backend.type_name == "vxlan" else None,
            local_addresses=frozenset(r.dst.network_address for r in local if r.type == RTN_LOCAL),
            special_addresses=frozenset(
                r.dst.network_address for r in local if r.type in RTN_SPECIAL
            ),
        )

    def _checked(
        self,
        leases: dict[sn.Net, tuple[LeaseInfo, KeyValue]],
        own: set[sn.Net],
        view: validate.NodeView,
    ) -> tuple[dict[sn.Net, LeaseInfo], list[tuple[str, int, str]]]:
        """The remote leases safe to route to, and the others with why. A key unchanged
        since the last full pass, checked against the same node facts, keeps its verdict
        (most of an idle pass's CPU was checking the same leases again)."""
        before_view, before = self._verdicts.get(view.network.version, (None, {}))
        known = before if before_view == view else {}
        verdicts: dict[str, tuple[int, str | None]] = {}
        remotes: dict[sn.Net, LeaseInfo] = {}
        rejected: list[tuple[str, int, str]] = []
        for subnet, (info, kv) in leases.items():
            if subnet in own:
                continue
            verdict = known.get(kv.key)
            if verdict is not None and verdict[0] == kv.mod_revision:
                problem = verdict[1]
            else:
                problem = validate.lease_problem(subnet, info, view)
            verdicts[kv.key] = (kv.mod_revision, problem)
            if problem is None:
                remotes[subnet] = info
            else:
                rejected.append((kv.key, kv.mod_revision, problem))
        self._verdicts[view.network.version] = (view, verdicts)
        return remotes, rejected

    def _apply_events(self, events: dict[str, WatchEvent]) -> bool:
        """The cheap pass: check the changed leases alone and change only their part of the
        data path. Returns False when a full pass must follow (a kernel call failed)."""
        try:
            if self._kernel is not None and self._kernel.changed():
                for path in self.paths:  # an address or a foreign route changed: read again
                    path.view = self._node_view(path)
        except Exception as exc:  # a kernel hiccup must not kill the agent
            self.log(f"cannot read the node's routes (a full pass follows): {exc}")
            return False
        own = {p.lease.subnet for p in self.paths if p.lease is not None}
        by_version = {p.version: p for p in self.paths}
        after = {p.version: dict(p.remotes) for p in self.paths}
        after_kvs = {p.version: dict(p.kvs) for p in self.paths}
        rejected: list[tuple[str, int, str]] = []
        self.tenures.new_pass()
        for key, event in events.items():
            subnet = self._subnet_of(key)
            deleted = event.kind == "DELETE" or event.kv is None
            if deleted:
                self.rejections.forget(key)
            if subnet is not None and subnet in own:
                self.tenures.forget(key)
                continue
            if subnet is None or subnet.version not in by_version:
                if not deleted and event.kv is not None:
                    parsed = self.store.parse(event.kv)
                    why = (
                        parsed
                        if isinstance(parsed, str)
                        else f"an IPv{parsed[0].version} subnet, and this cluster has no such "
                        "network"
                    )
                    rejected.append((key, event.revision, why))
                continue
            if deleted or event.kv is None:
                verdict = self.tenures.vanished(key)
            else:
                parsed = self.store.parse(event.kv)
                if isinstance(parsed, str):
                    rejected.append((key, event.revision, parsed))
                    verdict = self.tenures.judge(event.kv, None)
                else:
                    verdict = self.tenures.judge(event.kv, parsed[1])
                    if verdict.refused is not None:
                        rejected.append((key, event.revision, verdict.refused))
            use, problem = verdict.info, None
            if use is not None:
                view = by_version[subnet.version].view
                assert view is not None
                problem = validate.lease_problem(subnet, use, view)
                if problem is not None:
                    rejected.append((key, event.revision, problem))
            if use is None or problem is not None or verdict.kv is None:
                after[subnet.version].pop(subnet, None)
                after_kvs[subnet.version].pop(subnet, None)
            else:
                after[subnet.version][subnet] = use
                after_kvs[subnet.version][subnet] = verdict.kv
        changes: list[str] = []
        try:
            for path in self.paths:
                lease = path.lease
                assert lease is not None
                kvs = after_kvs[path.version]
                wanted = self._exclusive(path, after[path.version], kvs, rejected)
                if wanted != path.remotes:
                    applied = path.backend.update(lease.subnet, path.remotes, wanted)
                    changes += applied.changes
                    self._failed(applied, kvs, wanted, rejected)
                path.remotes, path.kvs = wanted, kvs
        except Exception as exc:  # a kernel hiccup must not kill the agent
            self.log(f"update failed (a full pass follows): {type(exc).__name__}: {exc}")
            return False
        finally:
            for line in self.rejections.fresh(rejected, complete=False):
                self.log(line)
            for change in changes:
                self.log(change)
        return True

    def _take_events(self) -> tuple[dict[str, WatchEvent], bool]:
        """The changes the watch delivered since the last pass, and whether a full pass is
        wanted (the watch started again, or it could not keep up)."""
        with self._watch_lock:
            events, full = self._pending, self._full_wanted
            self._pending, self._full_wanted = {}, False
        return events, full

    def _on_events(self, events: list[WatchEvent]) -> None:
        with self._watch_lock:
            if not events:  # a message too long to read: something changed, list them all
                self._full_wanted = True
            for event in events:
                if event.kv is not None and not self.store.names_subnet(event.key):
                    continue  # a key naming no subnet: nothing to route (full passes report it)
                if event.kv is None or len(self._pending) >= MAX_PENDING:
                    self._full_wanted = True  # unreadable or too many: list them all
                    self._pending.clear()
                    break
                self._pending[event.key] = event
        self.wake.set()

    def _want_full_pass(self, unless_listed_at: int = 0) -> None:
        """Ask for a full pass, unless the last one listed at ``unless_listed_at`` or later."""
        if unless_listed_at and self._listed_revision >= unless_listed_at:
            return
        with self._watch_lock:
            self._full_wanted = True
        self.wake.set()

    def _watch_loop(self) -> None:
        while not self.stop.is_set():
            try:
                revision = self.etcd.revision(self.store.subnets_prefix)
                watch = self.etcd.watch_prefix(self.store.subnets_prefix, revision + 1)
                with self._watch_lock:
                    self._watch = watch
                # Changes up to ``revision`` are a full pass's (one that lists after this).
                self._want_full_pass(unless_listed_at=revision)
                if self.stop.is_set():
                    return
                watch.run(self._on_events)
            except EtcdError:
                pass
            self._want_full_pass()  # whatever happened while we were not watching: look again
            self.stop.wait(1.0)

    def _close_watch(self) -> None:
        with self._watch_lock:
            watch = self._watch
        close = getattr(watch, "close", None)
        if close is not None:
            close()
