"""The picture `pycni inspect` builds: plain records, so JSON output is ``asdict``."""

from __future__ import annotations

from typing import Any

from pycni.record import asdict, field, record


@record
class Network:
    """One network configuration found in the conf dir."""

    name: str
    file: str
    cni_version: str = ""
    plugins: list[str] = field(default_factory=list)
    bridge: str | None = None
    subnets: list[str] = field(default_factory=list)
    data_dir: str | None = None
    error: str | None = None


@record
class Attachment:
    """One cached ADD result (``<cache>/results/<net>-<cid>-<ifname>``)."""

    network: str
    container_id: str
    ifname: str
    netns: str
    netns_exists: bool
    cache_file: str
    ips: list[str] = field(default_factory=list)
    host_interfaces: list[str] = field(default_factory=list)
    port_mappings: list[dict[str, Any]] = field(default_factory=list)
    cached_at: float = 0.0  # the cache file's mtime: when the ADD finished


@record
class Reservation:
    """One host-local reservation file (named by the IP, content ``cid\\r\\nifname``)."""

    network: str
    ip: str
    container_id: str
    ifname: str
    path: str
    reserved_at: float = 0.0  # the file's mtime: when the address was reserved


@record
class PodLink:
    """An interface inside another namespace (normally the pod end of a veth)."""

    namespace: str
    namespace_path: str
    name: str
    index: int
    mac: str = ""
    addresses: list[str] = field(default_factory=list)


@record
class Veth:
    """A veth in this namespace, with its peer when the peer's namespace was found."""

    name: str
    index: int
    mac: str = ""
    master: str | None = None
    up: bool = False
    addresses: list[str] = field(default_factory=list)
    peer_index: int | None = None
    peer_netnsid: int | None = None
    peer: PodLink | None = None


@record
class Bridge:
    name: str
    index: int
    mac: str = ""
    up: bool = False
    addresses: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)


@record
class HostInterface:
    """Any other interface of the node (uplinks, loopback)."""

    name: str
    index: int
    kind: str = ""
    up: bool = False
    addresses: list[str] = field(default_factory=list)


@record
class Route:
    dst: str
    dev: str = ""
    gateway: str | None = None
    source: str | None = None


@record
class Masquerade:
    """Pod addresses of one network whose traffic leaving ``subnet`` takes the node's address
    (bridge/ptp ``ipMasq``): the nftables table ``inet cni_plugins_masquerade`` or the
    iptables nat chains ``CNI-…`` (``ipMasqBackend: iptables``, the Go plugins up to 1.4)."""

    network: str
    subnet: str  # "" when only per-address rules (the Go reference's layout) say so
    addresses: list[str] = field(default_factory=list)
    backend: str = "nftables"  # or "iptables": a CNI-… chain in nat per attachment


@record
class PortMapping:
    """A DNAT rule of a portmap table (``handles`` = every rule of the same owner there)."""

    family: str
    table: str
    chain: str
    handle: int
    protocol: str
    host_port: int
    target_ip: str
    target_port: int
    host_ip: str | None = None
    owner: str = ""
    related_handles: list[tuple[str, int]] = field(default_factory=list)


@record
class Namespace:
    """A namespace we looked into: named ones (netns dir, mounts, cached netns paths) and
    any other live one holding the pod end of a veth."""

    name: str
    path: str
    links: list[PodLink] = field(default_factory=list)


@record
class OwnedRoute:
    """A route the cluster agent programmed (routing protocol 157)."""

    dst: str
    gateway: str
    dev: str = ""
    onlink: bool = False


@record
class VxlanDevice:
    """A VXLAN device with its remote VTEPs (FDB: MAC → underlay address)."""

    name: str
    index: int
    vni: int | None = None
    local: str | None = None
    port: int | None = None
    mac: str = ""
    up: bool = False
    addresses: list[str] = field(default_factory=list)
    peers: dict[str, str] = field(default_factory=dict)


@record
class ClusterLease:
    """The node's lease as the agent wrote it to a subnet file (flannel's subnet.env)."""

    subnet_file: str
    network: str = ""
    subnet: str = ""
    gateway: str = ""
    mtu: int | None = None
    ipmasq: bool | None = None
    error: str | None = None


@record
class ClusterAgentState:
    """What the cluster agent (`pycni agent`) keeps on this node."""

    leases: list[ClusterLease] = field(default_factory=list)
    routes: list[OwnedRoute] = field(default_factory=list)
    vxlan_devices: list[VxlanDevice] = field(default_factory=list)
    masquerade_table: bool = False


@record
class EntryPointDir:
    """The pycni entry points of one plugin directory, by how they were installed."""

    directory: str
    plugins: int = 0  # pycni entry points found (other files are not counted)
    modes: list[str] = field(default_factory=list)  # e.g. "c form, autostart (idle exit 300s)"


@record
class DaemonStatus:
    """Whether the warm daemon answers on its socket, and how it was started.

    ``mode`` is what the installed entry points do: ``warm`` (they forward to this daemon) or
    ``in-process`` (no daemon answers, so each call runs the plugin in its own process).
    """

    socket: str
    answers: bool = False
    mode: str = "in-process"
    status: str = ""
    pid: int | None = None
    workers: int | None = None
    uptime_seconds: float | None = None
    started_by: str = ""
    how: str = ""  # health's startedBy: autostart, socket-activation, systemd, manual
    error: str = ""
    entry_points: list[EntryPointDir] = field(default_factory=list)
    # How calls made by this caller run ("through the daemon", or "in-process: why").
    here: str = ""
    chosen_because: str = ""  # why this socket: "given", "N entry points forward to it", …


@record
class DnsServer:
    """A dnsname plugin's per-network dnsmasq (``<dnsname dir>/<network>/``)."""

    network: str
    directory: str
    domain: str = ""
    interface: str = ""
    pid: int | None = None
    in_this_namespace: bool = False
    hosts: list[str] = field(default_factory=list)  # "IP name alias…" per hosts-file line
    records: int = 0
    changed_at: float = 0.0  # newest mtime of the directory and its hosts file
    problems: list[str] = field(default_factory=list)


@record
class NodeState:
    netns: str
    conf_dir: str
    cache_dir: str
    data_dir: str
    networks: list[Network] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    bridges: list[Bridge] = field(default_factory=list)
    veths: list[Veth] = field(default_factory=list)
    interfaces: list[HostInterface] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    port_mappings: list[PortMapping] = field(default_factory=list)
    masquerades: list[Masquerade] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # what the user should know but need not act on (not a problem; e.g. an opaque init)
    notes: list[str] = field(default_factory=list)
    cluster: ClusterAgentState | None = None
    daemon: DaemonStatus | None = None
    dns_servers: list[DnsServer] = field(default_factory=list)
    # Every live network namespace of the machine was scanned (see net/nsscan.py):
    # how many, each address found in one (ip -> namespace labels), and whether the scan
    # was complete enough to prove an address unused / a veth peer's namespace gone.
    live_namespaces: int = 0
    store_dirs: list[str] = field(default_factory=list)  # host-local stores read
    live_addresses: dict[str, list[str]] = field(default_factory=dict)
    addresses_complete: bool = False
    peers_complete: bool = False


def to_dict(obj: Any) -> dict[str, Any]:
    """A record as plain JSON-able data."""
    data = asdict(obj)
    assert isinstance(data, dict)
    return data
