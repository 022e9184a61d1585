"""The typed kernel boundary: what pycni asks of rtnetlink, as one Protocol over records.

Plugins and net/ helpers talk to the kernel only through a ``Kernel`` (opened by
``pycni.net.netlink.client.rtnl()``; plugins are handed theirs by pycni.skel.host): links,
addresses, routes, neighbours, FDB entries, policy rules and the few tc objects the bandwidth
plugin makes. Replies are frozen records
(pycni.record) with typed fields; every kernel refusal is one ``NetlinkError`` (an OSError
whose ``errno`` the callers test by name). Two implementations exist: the native client
(``pycni.net.netlink.rtnl.native``, raw sockets, every call encoded with ``struct``) on a real
kernel, and FakeKernel (``pycni.net.netlink.fake_kernel``) in memory, held to the native client
by tests/kernel_contract.py. This module imports neither, so importing it costs nothing.
"""

from __future__ import annotations

import errno
import ipaddress
import os

from pycni.net.errors import NetError
from pycni.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol, TypedDict, Unpack

    class LinkChanges(TypedDict, total=False):
        """What ``Kernel.set_link`` changes, in one request: only the keys given (None is not
        given). ``flags`` under ``flag_mask`` sets raw IFF_* bits; an empty alias removes it.
        Declared here once for the Protocol, its implementations and the encoder."""

        up: bool | None
        master: int | None
        mtu: int | None
        mac: str | None
        name: str | None
        netns_fd: int | None
        alias: str | None
        txqlen: int | None
        flags: int
        flag_mask: int
else:
    Protocol = object  # typing is not imported at run time

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

AF_INET = 2
AF_INET6 = 10
MAIN_TABLE = 254
RTPROT_STATIC = 4
RTN_UNICAST = 1
NUD_PERMANENT = 0x80

# IPv4 per-device settings (include/uapi/linux/ip.h IPV4_DEVCONF_*): the ids of the entries
# under /proc/sys/net/ipv4/conf/<dev>/ that set_ipv4_conf writes over netlink
IPV4_DEVCONF_ARP_NOTIFY = 22
IPV4_DEVCONF_ROUTE_LOCALNET = 26

# tc handles of the bandwidth plugin's objects (include/uapi/linux/pkt_sched.h), both backends
TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1  # the ingress qdisc's parent
INGRESS_HANDLE = 0xFFFF0000  # ffff:
CLASS_1_1 = 0x00010001
ETH_P_ALL = 0x0003

IFF_UP = 0x1
IFF_PROMISC = 0x100
IFF_ALLMULTI = 0x200


def family_of(version: int) -> int:
    """The address family number of an IP version (4 or 6)."""
    return AF_INET6 if version == 6 else AF_INET


def broadcast_of(interface: IPInterface) -> ipaddress.IPv4Address | None:
    """The broadcast address an IPv4 address is added with: the subnet's last address for a
    prefix shorter than /31 (RFC 3021), as Go's netlink library sets it on every AddrAdd,
    so ``ip addr`` shows the reference's ``brd``; None for /31, /32 and IPv6."""
    if interface.version != 4 or interface.network.prefixlen >= 31:
        return None
    return ipaddress.IPv4Address(interface.network.broadcast_address)


class NetlinkError(NetError, OSError):
    """The kernel refused a netlink request (an error reply); ``errno`` says why.

    The native client and FakeKernel both raise it, so callers catch this one type and tell
    cases apart by the named properties below."""

    def __init__(self, code: int, msg: str = "") -> None:
        super().__init__(code, msg or os.strerror(code))

    def __str__(self) -> str:
        # the text pyroute2's NetlinkError had, which CNI error messages have always shown
        return str((self.code, self.strerror))

    @property
    def code(self) -> int:
        """The errno (the name pyroute2's NetlinkError used)."""
        return int(self.errno or 0)

    @property
    def no_such_link(self) -> bool:
        """The link (or its namespace) is gone: ENODEV or ENOENT."""
        return self.code in (errno.ENODEV, errno.ENOENT)

    @property
    def exists(self) -> bool:
        """An object with that name or key is already there: EEXIST."""
        return self.code == errno.EEXIST

    @property
    def no_such_entry(self) -> bool:
        """A route, neighbour or FDB entry to delete is not there: ESRCH or ENOENT."""
        return self.code in (errno.ESRCH, errno.ENOENT)

    @property
    def not_supported(self) -> bool:
        """The kernel lacks the feature (e.g. bridge VLAN filtering): EOPNOTSUPP."""
        return self.code == errno.EOPNOTSUPP


# ------------------------------------------------------------------ replies


@record(frozen=True)
class VxlanInfo:
    """IFLA_INFO_DATA of a vxlan link (only what pycni compares)."""

    vni: int | None = None
    local: IPAddress | None = None
    underlay_index: int = 0
    port: int = 0
    learning: bool = False


@record(frozen=True)
class Link:
    """One RTM_NEWLINK reply."""

    index: int
    name: str
    flags: int = 0
    mac: str = ""
    mtu: int = 0
    master: int = 0
    peer_index: int = 0  # IFLA_LINK: a veth's peer (in the peer's namespace), a macvlan's master
    peer_netnsid: int | None = None  # IFLA_LINK_NETNSID: the namespace of peer_index, if other
    kind: str = ""  # IFLA_INFO_KIND: "" for a physical or loopback link
    oper_state: str = "unknown"  # lower case, as `ip link` shows it
    alias: str = ""
    txqlen: int = 0
    promiscuity: int = 0
    macvlan_mode: int | None = None
    vxlan: VxlanInfo | None = None
    ipvlan_mode: int | None = None  # IFLA_IPVLAN_MODE: 0 l2, 1 l3, 2 l3s
    ipvlan_flags: int = 0  # IFLA_IPVLAN_FLAGS: 0 bridge, 1 private, 2 vepa
    vlan_id: int | None = None  # IFLA_VLAN_ID of an 802.1Q link
    vrf_table: int | None = None  # IFLA_VRF_TABLE of a vrf link

    @property
    def up(self) -> bool:
        """IFF_UP: administratively up."""
        return bool(self.flags & IFF_UP)


@record(frozen=True)
class Address:
    """One RTM_NEWADDR reply: ``interface`` is IFA_ADDRESS (IFA_LOCAL if absent)/prefixlen."""

    index: int
    interface: IPInterface
    flags: int = 0  # IFA_FLAGS when present (32 bits), else the header's 8
    scope: int = 0

    @property
    def family(self) -> int:
        return family_of(self.interface.version)


@record(frozen=True)
class Route:
    """A route: an RTM_NEWROUTE reply, or what to add/replace/delete.

    For a request, None means "not given": a new route gets proto static and type unicast
    (as pyroute2), a delete leaves both 0, which matches any (the kernel's own routes too)."""

    dst: IPNetwork
    oif: int = 0
    gateway: IPAddress | None = None
    table: int = MAIN_TABLE
    proto: int | None = None
    scope: int | None = None
    type: int | None = None
    flags: int = 0  # rtm_flags; RTNH_F_ONLINK (4) for an on-link gateway
    priority: int | None = None
    prefsrc: IPAddress | None = None
    mtu: int = 0  # RTAX_MTU
    multipath_oifs: tuple[int, ...] = ()  # RTA_MULTIPATH next hops' links (replies only)

    @property
    def family(self) -> int:
        return family_of(self.dst.version)


@record(frozen=True)
class Neighbour:
    """One neighbour (ARP/NDP) entry."""

    index: int
    address: IPAddress
    mac: str
    state: int


@record(frozen=True)
class FdbEntry:
    """One forwarding entry of a device: ``mac`` reaches ``remote`` (a VXLAN VTEP) if given."""

    index: int
    mac: str
    remote: IPAddress | None


@record(frozen=True)
class Rule:
    """A policy routing rule: ``from src lookup table`` at ``priority`` (None: the kernel's)."""

    family: int
    table: int
    src: IPNetwork | None = None
    priority: int | None = None


@record(frozen=True)
class Tbf:
    """What the kernel stores for a tbf: rate (bytes/s), buffer (ticks), limit (bytes)."""

    rate: int
    buffer: int
    limit: int


@record(frozen=True)
class Qdisc:
    """One queueing discipline of a link; ``tbf`` holds a tbf's parameters."""

    index: int
    kind: str
    handle: int = 0
    parent: int = 0
    tbf: Tbf | None = None


# ------------------------------------------------------------------ the boundary


class Kernel(Protocol):
    """An rtnetlink client bound to one network namespace (the thread's when it was opened).

    Every method raises NetlinkError when the kernel refuses."""

    def close(self) -> None: ...

    def fileno(self) -> int: ...

    # links
    def link(self, index: int) -> Link:
        """The link with that index; NetlinkError (no_such_link) if none."""
        ...

    def find_link(self, name: str) -> Link | None:
        """The link with that name, None if there is none."""
        ...

    def links(self) -> list[Link]: ...

    def add_veth(
        self,
        name: str,
        peer_name: str,
        peer_netns_fd: int,
        mtu: int = 0,
        peer_mac: str = "",
        master: int = 0,
        txqlen: int | None = None,
    ) -> int:
        """A veth ``name`` here whose peer ``peer_name`` is created in ``peer_netns_fd``,
        enslaved to link ``master`` at creation when given, with tx queue length ``txqlen``
        (None: the kernel's default; the peer always has it); its index, or 0 when the kernel
        did not say (before 6.3 it does not echo a new link)."""
        ...

    def add_bridge(self, name: str, mtu: int = 0, vlan_filtering: bool = False) -> None: ...

    def add_macvlan(
        self,
        name: str,
        master: int,
        mode: int,
        netns_fd: int,
        mtu: int = 0,
        mac: str = "",
        bc_queue_len: int = 0,
    ) -> None:
        """A macvlan of link ``master`` (mode IFLA_MACVLAN_MODE) created in ``netns_fd``;
        ``bc_queue_len`` > 0 asks for that broadcast queue (IFLA_MACVLAN_BC_QUEUE_LEN, 5.11+),
        which the kernel shares by all macvlans of the master (the largest request wins)."""
        ...

    def add_ipvlan(
        self, name: str, master: int, mode: int, flags: int, netns_fd: int, mtu: int = 0
    ) -> None:
        """An ipvlan of link ``master`` (IFLA_IPVLAN_MODE/FLAGS) created in ``netns_fd``."""
        ...

    def add_vlan(self, name: str, master: int, vlan_id: int, netns_fd: int, mtu: int = 0) -> None:
        """An 802.1Q link of ``master`` tagging ``vlan_id``, created in ``netns_fd``."""
        ...

    def add_vxlan(
        self,
        name: str,
        vni: int,
        local: IPAddress,
        underlay_index: int,
        port: int,
        mtu: int,
        learning: bool = False,
    ) -> None: ...

    def add_ifb(self, name: str, mtu: int, txqlen: int) -> None: ...

    def add_dummy(self, name: str, mtu: int = 0) -> None: ...

    def add_vrf(self, name: str, table: int) -> None:
        """A VRF device ``name`` whose routes live in routing table ``table``."""
        ...

    def set_link(self, index: int, **changes: Unpack[LinkChanges]) -> None:
        """Change what is given (see LinkChanges), in one request."""
        ...

    def delete_link(self, index: int) -> None: ...

    def set_ipv4_conf(self, index: int, values: dict[int, int]) -> None:
        """Set IPv4 per-device settings (IPV4_DEVCONF_* id → value) of a link with one
        RTM_SETLINK (IFLA_AF_SPEC/AF_INET/IFLA_INET_CONF): the same state as writing
        /proc/sys/net/ipv4/conf/<dev>/<name>, for the entries whose /proc handler does nothing
        more (arp_notify; route_localnet set to 1), without the /proc/sys path walk whose cost
        grows with the namespaces on the machine (docs/benchmarks.md)."""
        ...

    def forwarding(self, family: int) -> int:
        """The namespace's forwarding switch (net.ipv4.ip_forward, net.ipv6.conf.all.forwarding)
        from RTM_GETNETCONF, read without a /proc/sys walk."""
        ...

    def set_bridge_port(self, index: int, hairpin: bool, isolated: bool) -> None: ...

    def port_vlans(self, index: int) -> list[int]:
        """The VLAN ids of a bridge port."""
        ...

    def add_port_vlan(self, index: int, vid: int, flags: int = 0) -> None:
        """Make the port a member of ``vid`` (``flags``: BRIDGE_VLAN_INFO_PVID/UNTAGGED),
        as ``bridge vlan add dev PORT vid VID [pvid] [untagged] master``."""
        ...

    def delete_port_vlan(self, index: int, vid: int) -> None: ...

    # addresses
    def addresses(self, index: int = 0, family: int = 0) -> list[Address]:
        """Addresses, filtered by link and family (0: any) by the kernel when it can."""
        ...

    def add_address(self, index: int, interface: IPInterface, flags: int = 0) -> None: ...

    def delete_address(self, index: int, interface: IPInterface) -> None: ...

    # routes
    def routes(self, family: int, table: int = 0, oif: int = 0) -> list[Route]:
        """Routes of one family, in ``table`` and through ``oif`` when given (0: any)."""
        ...

    def route_to(self, dst: IPAddress) -> list[Route]:
        """The route the kernel would take to ``dst`` (``ip route get``)."""
        ...

    def add_route(self, route: Route) -> None:
        """Add; NetlinkError (exists) if the destination already has such a route."""
        ...

    def replace_route(self, route: Route) -> None: ...

    def delete_route(self, route: Route) -> None: ...

    # neighbours and forwarding entries
    def neighbours(self, index: int, family: int) -> list[Neighbour]: ...

    def set_neighbour(self, index: int, address: IPAddress, mac: str) -> None:
        """A permanent entry (created or replaced)."""
        ...

    def delete_neighbour(self, index: int, address: IPAddress) -> None: ...

    def fdb_entries(self, index: int) -> list[FdbEntry]: ...

    def set_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        """A permanent entry of the device itself (NTF_SELF), created or replaced."""
        ...

    def delete_fdb(self, index: int, mac: str, remote: IPAddress) -> None: ...

    # policy rules
    def rules(self, family: int) -> list[Rule]: ...

    def add_rule(self, rule: Rule) -> None: ...

    def delete_rule(self, rule: Rule) -> None: ...

    # traffic control
    def qdiscs(self, index: int) -> list[Qdisc]: ...

    def add_tbf(self, index: int, handle: int, tbf: Tbf) -> None:
        """A root tbf; NetlinkError (exists) if the link already has that root qdisc."""
        ...

    def add_ingress(self, index: int) -> None: ...

    def redirect_ingress(self, index: int, target_index: int) -> None:
        """A u32 match-all filter on the ingress qdisc mirroring (egress redirect) every
        packet to ``target_index``."""
        ...

    def delete_qdisc(self, index: int, parent: int) -> None:
        """Remove the qdisc under ``parent`` (root or ingress)."""
        ...

    # namespaces
    def netns_id(self, netns_fd: int) -> int | None:
        """The id this namespace gives ``netns_fd`` (None if it has none)."""
        ...
