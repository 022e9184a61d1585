"""FakeKernel: the ``Kernel`` Protocol in memory, for tests of plugin logic without root.

Why here and not under tests/: it is an implementation of pycni.net.netlink.kernel.Kernel like the
native client, so it lives beside it, is type-checked with it
(mypy --strict runs on src/ only; the ``_check`` line at the bottom makes mypy prove it
satisfies the Protocol) and sits under the layer contract (it imports only pycni.net.netlink.kernel
and pycni.record). Only pycni.skel.fake_host (which nothing imports) imports it, so no
plugin's cold path pays for it; tests and downstream code import it as httpx's users import
its MockTransport.

A ``FakeMachine`` holds namespaces (``FakeNetns``), each known by a fake file descriptor as the
real ones are known by an fd of /run/netns/<name>; ``FakeKernel(ns)`` is a client bound to one
of them, as a client opened in that namespace is. It answers like Linux 6.x does with default
sysctls, and raises the same ``NetlinkError`` with the same errno; tests/kernel_contract.py runs
the same cases against it and against the native client in private namespaces (the kernel
suite) so the two cannot drift apart. Modelled:

- links: lo, veth pairs across namespaces, bridges (ports, MTU following the smallest port's
  until one is set on the bridge, the port's MAC), macvlan, vxlan, ifb, taps (``add_tap``: what
  TUNSETIFF and TUNSETPERSIST leave once the fd is closed, for the tap plugin's tests; no
  carrier, since no queue is attached); up/down, MTU ranges,
  MAC (multicast and zero refused), alias, txqlen, promiscuity, names (IFNAMSIZ, '/', ':',
  whitespace, '.', '..'), moving to another namespace (down, without addresses, routes or
  master; lo and bridges cannot move), deleting (a veth's peer and a link's macvlans go too);
- addresses: IPv4 duplicates by address and prefix, IPv6 by address; lo up gets 127.0.0.1/8
  and ::1; the kernel's prefix routes (proto kernel) of an up link's addresses;
  a link going down loses every route through it and (keep_addr_on_down 0) its IPv6 addresses;
- routes: main and other tables, EEXIST on (table, dst, metric), ENETDOWN on a down link,
  ENETUNREACH for a gateway no link route covers (unless onlink), replace, delete matching as
  the kernel does (ESRCH), ``route_to`` by longest prefix in the main table;
- policy rules with the namespace's default ones, the kernel's choice of a priority, EEXIST,
  ENOENT; neighbours, FDB entries, IPv4 devconf, forwarding, bridge port flags and VLANs, the
  bandwidth plugin's tc objects, netns ids;
- VRFs: an up port is cycled when it joins or leaves (its routes flushed, its connected
  routes in the VRF's table), gateways checked in the route's table then by a full lookup
  (main, or a port's VRF table), the l3mdev rules the first VRF adds (held to a kernel with
  the vrf module by the full-kernel lane);
- sysctls: each namespace's ``sysctl`` (FakeSysctl, a pycni.net.sysctl.Sysctl) holds the
  forwarding switches and the per-device entries plugins write (arp_notify, accept_ra,
  disable_ipv6, keep_addr_on_down, ...), tied to the link state they govern.

Left out (a test that needs one of these runs against the real kernel): the local routing
table (255) and broadcast routes, IPv6 link-local autoconfiguration and DAD, operational state
changes beyond up/down/lower-layer-down, the namespace-wide conf/all and conf/default
sysctls and any entry FakeSysctl does not name (it raises LookupError), policy routing in
``route_to``, multipath routes, IPv4 secondary addresses' promotion.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import os
from typing import TYPE_CHECKING, Unpack

from pycni.net.netlink.kernel import (
    AF_INET,
    AF_INET6,
    IFF_PROMISC,
    IFF_UP,
    INGRESS_HANDLE,
    MAIN_TABLE,
    NUD_PERMANENT,
    RTN_UNICAST,
    RTPROT_STATIC,
    TC_H_INGRESS,
    TC_H_ROOT,
    Address,
    FdbEntry,
    IPAddress,
    IPInterface,
    Kernel,
    Link,
    Neighbour,
    NetlinkError,
    Qdisc,
    Route,
    Rule,
    Tbf,
    VxlanInfo,
    family_of,
)
from pycni.record import field, record, replace

if TYPE_CHECKING:
    from pycni.net.netlink.kernel import LinkChanges

IFF_BROADCAST = 0x2
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40
IFF_NOARP = 0x80
IFF_MULTICAST = 0x1000
IFF_LOWER_UP = 0x10000
IFNAMSIZ = 16
IFA_F_PERMANENT = 0x80
RTPROT_KERNEL = 2
RT_SCOPE_LINK = 253
RT_SCOPE_HOST = 254
RTNH_F_ONLINK = 4
LOCAL_TABLE = 255
DEFAULT_TABLE = 253
L3MDEV_RULE_PRIORITY = 1000  # the rule the first VRF of a namespace adds (table 0: l3mdev)
IPV6_DEFAULT_METRIC = 1024
IPV6_PREFIX_METRIC = 256
ETH_MIN_MTU = 68
ETH_MAX_MTU = 65535
DEFAULT_MTU = 1500
VXLAN_HEADROOM = 50  # outer IPv4, UDP, VXLAN and Ethernet headers
VXLAN6_HEADROOM = 70  # the same over IPv6
TAP_MAX_MTU = 65535 - 14  # tun's max_mtu: MAX_MTU less a tap's Ethernet header
LOOPBACK_ADDRESSES = (ipaddress.ip_interface("127.0.0.1/8"), ipaddress.ip_interface("::1/128"))
NETNS_LOCAL = ("", "bridge")  # lo and bridges refuse to change namespace (NETIF_F_NETNS_LOCAL)


def _refuse(code: int) -> NetlinkError:
    return NetlinkError(code)


@record
class _Link:
    """A link's mutable state (Link records are made from it on every read)."""

    index: int
    name: str
    kind: str
    mtu: int
    mac: str
    mac_set: bool = False  # a MAC given by the user: a bridge keeps it
    up: bool = False
    master: int = 0
    alias: str = ""
    txqlen: int = 1000
    promisc: bool = False
    peer: tuple[FakeNetns, int] | None = None  # a veth's other end, a macvlan's lower link
    macvlan_mode: int | None = None
    macvlan_bc_queue_len: int = 0  # what ADD asked for; the Link record does not carry it
    vxlan: VxlanInfo | None = None
    mtu_by_user: bool = False  # a bridge's MTU set on it no longer follows its ports
    vlan_filtering: bool = False
    hairpin: bool = False
    isolated: bool = False
    vlans: list[int] = field(default_factory=list)
    ipv4_conf: dict[int, int] = field(default_factory=dict)
    ipv6_conf: dict[str, int] = field(default_factory=dict)  # net/ipv6/conf/<dev>/ as written
    vrf_table: int | None = None
    ipvlan_mode: int | None = None
    ipvlan_flags: int = 0
    vlan_id: int | None = None
    tun_multi_queue: bool = False  # a tap made with IFF_MULTI_QUEUE

    @property
    def loopback(self) -> bool:
        return self.name == "lo" and self.kind == ""


class FakeNetns:
    """One network namespace: its links, addresses, routes, rules, neighbours and settings."""

    def __init__(self, host: FakeMachine, fd: int) -> None:
        self.host = host
        self.fd = fd
        self.links: dict[int, _Link] = {}
        self.addresses: list[Address] = []
        self.routes: list[Route] = []
        self.rules: list[Rule] = [
            Rule(AF_INET, LOCAL_TABLE, None, None),
            Rule(AF_INET, MAIN_TABLE, None, 32766),
            Rule(AF_INET, DEFAULT_TABLE, None, 32767),
            Rule(AF_INET6, LOCAL_TABLE, None, None),
            Rule(AF_INET6, MAIN_TABLE, None, 32766),
        ]
        self.neighbours: dict[tuple[int, IPAddress], str] = {}
        self.fdb: dict[tuple[int, str], IPAddress] = {}
        self.qdiscs: dict[int, list[Qdisc]] = {}
        self.redirects: dict[int, int] = {}
        self.forwarding = {AF_INET: 0, AF_INET6: 0}
        self.nsids: dict[int, int] = {}  # another namespace's fd -> the id this one gives it
        self.sysctl = FakeSysctl(self)
        self._next_index = itertools.count(1)
        lo = _Link(self._new_index(), "lo", "", 65536, "00:00:00:00:00:00", txqlen=1000)
        self.links[lo.index] = lo

    def _new_index(self, wanted: int = 0) -> int:
        if wanted and wanted not in self.links:
            return wanted
        while True:
            index = next(self._next_index)
            if index not in self.links:
                return index

    def by_name(self, name: str) -> _Link | None:
        for link in self.links.values():
            if link.name == name:
                return link
        return None

    def get(self, index: int) -> _Link:
        link = self.links.get(index)
        if link is None:
            raise _refuse(errno.ENODEV)
        return link

    def nsid_of(self, other: FakeNetns) -> int:
        """The id this namespace gives ``other``, allocated on first need (as the kernel does
        when it reports a link's peer namespace)."""
        if other.fd not in self.nsids:
            self.nsids[other.fd] = len(self.nsids)
        return self.nsids[other.fd]


class FakeMachine:
    """The machine: namespaces known by fake fds (``ns.fd``), which the calls that take a
    namespace fd (add_veth, add_macvlan, set_link(netns_fd=)) accept."""

    FIRST_FD = 1 << 20  # far above any real descriptor, so a real fd is never mistaken for one

    def __init__(self, bridge_vlan_filtering: bool = True) -> None:
        self.bridge_vlan_filtering = bridge_vlan_filtering
        self.namespaces: dict[int, FakeNetns] = {}
        self._fds = itertools.count(self.FIRST_FD)
        self._macs = itertools.count(1)

    def namespace(self, lo_up: bool = True) -> FakeNetns:
        """A new namespace; lo up by default, as pycni.playground.create_netns leaves it."""
        ns = FakeNetns(self, next(self._fds))
        self.namespaces[ns.fd] = ns
        if lo_up:
            FakeKernel(ns).set_link(1, up=True)
        return ns

    def resolve(self, fd: int) -> FakeNetns:
        ns = self.namespaces.get(fd)
        if ns is None:
            raise _refuse(errno.EBADF)
        return ns

    def random_mac(self) -> str:
        """A locally administered unicast MAC, as eth_hw_addr_random makes (but predictable)."""
        n = next(self._macs)
        return "02:fa:" + ":".join(f"{n >> shift & 255:02x}" for shift in (24, 16, 8, 0))


# ------------------------------------------------------------------ checks the kernel makes


def _check_name(name: str) -> None:
    if len(name.encode()) >= IFNAMSIZ:
        raise _refuse(errno.ERANGE)  # the netlink policy of IFLA_IFNAME
    if not name or name in (".", "..") or any(c in "/:" or c.isspace() for c in name):
        raise _refuse(errno.EINVAL)  # dev_valid_name


def _mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return bytes(int(p, 16) for p in parts)


def _check_mac(mac: str) -> str:
    raw = _mac_bytes(mac)
    if raw[0] & 1 or not any(raw):
        raise _refuse(errno.EADDRNOTAVAIL)  # is_valid_ether_addr
    return ":".join(f"{b:02x}" for b in raw)


def _check_mtu(mtu: int, maximum: int = ETH_MAX_MTU) -> None:
    if mtu < ETH_MIN_MTU or mtu > maximum:
        raise _refuse(errno.EINVAL)


def _prefix(interface: IPInterface) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return interface.network


class FakeKernel:
    """A Kernel bound to one FakeNetns (see the module docstring for what it models)."""

    def __init__(self, ns: FakeNetns) -> None:
        self.ns = ns
        self._closed = False

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self._closed = True

    def fileno(self) -> int:
        self._open()
        return self.ns.fd

    def _open(self) -> FakeNetns:
        if self._closed:
            raise OSError(errno.EBADF, "the client is closed")
        return self.ns

    # ------------------------------------------------------------ links

    def _record(self, link: _Link) -> Link:
        ns = self.ns
        flags = IFF_LOOPBACK if link.loopback else IFF_BROADCAST | IFF_MULTICAST
        if link.kind == "ifb":
            flags |= IFF_NOARP
        oper = "unknown" if link.loopback else "down"
        if link.up:
            flags |= IFF_UP
            carrier = self._carrier(link)
            if carrier:
                flags |= IFF_RUNNING | IFF_LOWER_UP
            if not link.loopback:
                oper = "up" if carrier else "lowerlayerdown" if link.kind == "veth" else "down"
        if link.promisc:
            flags |= IFF_PROMISC
        peer_index, netnsid = 0, None
        if link.peer is not None:
            peer_ns, peer_index = link.peer
            if peer_ns is not ns:
                netnsid = ns.nsid_of(peer_ns)
        return Link(
            index=link.index,
            name=link.name,
            flags=flags,
            mac=link.mac,
            mtu=link.mtu,
            master=link.master,
            peer_index=peer_index,
            peer_netnsid=netnsid,
            kind=link.kind,
            oper_state=oper,
            alias=link.alias,
            vrf_table=link.vrf_table,
            txqlen=link.txqlen,
            promiscuity=int(link.promisc),
            macvlan_mode=link.macvlan_mode,
            vxlan=link.vxlan,
            ipvlan_mode=link.ipvlan_mode,
            ipvlan_flags=link.ipvlan_flags,
            vlan_id=link.vlan_id,
        )

    def _carrier(self, link: _Link) -> bool:
        if link.kind == "veth" and link.peer is not None:
            peer_ns, peer_index = link.peer
            peer = peer_ns.links.get(peer_index)
            return peer is not None and peer.up
        if link.kind == "bridge":
            return any(p.master == link.index and p.up for p in self.ns.links.values())
        return link.kind != "tun"  # a persistent tap whose fd was closed has no queue attached

    def link(self, index: int) -> Link:
        return self._record(self._open().get(index))

    def find_link(self, name: str) -> Link | None:
        found = self._open().by_name(name)
        return None if found is None else self._record(found)

    def links(self) -> list[Link]:
        return [self._record(x) for x in sorted(self._open().links.values(), key=_index)]

    def _create(self, ns: FakeNetns, name: str, kind: str, mtu: int, mac: str = "") -> _Link:
        _check_name(name)
        if ns.by_name(name) is not None:
            raise _refuse(errno.EEXIST)
        if mtu:
            _check_mtu(mtu)
        made = _Link(
            index=0,
            name=name,
            kind=kind,
            mtu=mtu or DEFAULT_MTU,
            mac=_check_mac(mac) if mac else ns.host.random_mac(),
            mac_set=bool(mac),
        )
        return made

    @staticmethod
    def _insert(ns: FakeNetns, link: _Link, wanted: int = 0) -> _Link:
        link.index = ns._new_index(wanted)
        ns.links[link.index] = link
        return link

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
        ns = self._open()
        peer_ns = ns.host.resolve(peer_netns_fd)
        host = self._create(ns, name, "veth", mtu)
        if txqlen is not None:
            host.txqlen = txqlen
        if peer_ns is ns and peer_name == name:
            raise _refuse(errno.EEXIST)
        if master and ns.links.get(master) is None:
            raise _refuse(errno.EINVAL)  # the creating request fails whole: nothing is made
        peer = self._create(peer_ns, peer_name, "veth", mtu, peer_mac)
        self._insert(peer_ns, peer)
        self._insert(ns, host)
        host.peer = (peer_ns, peer.index)
        peer.peer = (ns, host.index)
        if master:
            self._set_master(ns, host, master)
        return host.index

    def add_dummy(self, name: str, mtu: int = 0) -> None:
        ns = self._open()
        self._insert(ns, self._create(ns, name, "dummy", mtu))

    def add_vrf(self, name: str, table: int) -> None:
        ns = self._open()
        made = self._create(ns, name, "vrf", 0)
        made.mtu = 65575  # the kernel gives a vrf IP6_MAX_MTU
        made.vrf_table = table
        self._insert(ns, made)
        for family in (AF_INET, AF_INET6):  # vrf_add_fib_rules: the l3mdev rule, kept after
            l3mdev = Rule(family, 0, None, L3MDEV_RULE_PRIORITY)
            if l3mdev not in ns.rules:
                ns.rules.append(l3mdev)

    def add_bridge(self, name: str, mtu: int = 0, vlan_filtering: bool = False) -> None:
        ns = self._open()
        if vlan_filtering and not ns.host.bridge_vlan_filtering:
            raise _refuse(errno.EOPNOTSUPP)
        bridge = self._create(ns, name, "bridge", mtu)
        bridge.vlan_filtering = vlan_filtering
        self._insert(ns, bridge)

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
        ns = self._open()
        target = ns.host.resolve(netns_fd)
        lower = ns.get(master)
        if lower.loopback:
            raise _refuse(errno.EINVAL)  # macvlan_port_create: not an Ethernet device
        made = self._create(target, name, "macvlan", 0, mac)
        if mtu:
            _check_mtu(mtu, lower.mtu)
        made.mtu = mtu or lower.mtu
        made.macvlan_mode = mode
        made.macvlan_bc_queue_len = bc_queue_len
        made.peer = (ns, lower.index)
        self._insert(target, made)

    def add_ipvlan(
        self, name: str, master: int, mode: int, flags: int, netns_fd: int, mtu: int = 0
    ) -> None:
        ns = self._open()
        target = ns.host.resolve(netns_fd)
        lower = ns.get(master)
        if lower.loopback or not 0 <= mode <= 2 or flags not in (0, 1, 2):
            raise _refuse(errno.EINVAL)
        made = self._create(target, name, "ipvlan", 0, lower.mac)  # slaves share its MAC
        if mtu:
            _check_mtu(mtu, lower.mtu)
        made.mtu = mtu or lower.mtu
        made.ipvlan_mode, made.ipvlan_flags = mode, flags
        made.peer = (ns, lower.index)
        self._insert(target, made)

    def add_vlan(self, name: str, master: int, vlan_id: int, netns_fd: int, mtu: int = 0) -> None:
        ns = self._open()
        target = ns.host.resolve(netns_fd)
        lower = ns.get(master)
        if lower.loopback or not 0 <= vlan_id <= 4094:
            raise _refuse(errno.EINVAL)
        for host_ns in ns.host.namespaces.values():  # one link per VLAN id on a lower link
            for other in host_ns.links.values():
                if other.vlan_id == vlan_id and other.peer == (ns, lower.index):
                    raise _refuse(errno.EEXIST)
        made = self._create(target, name, "vlan", 0, lower.mac)
        if mtu:
            _check_mtu(mtu, lower.mtu)
        made.mtu = mtu or lower.mtu
        made.vlan_id = vlan_id
        made.peer = (ns, lower.index)
        self._insert(target, made)

    def add_vxlan(
        self,
        name: str,
        vni: int,
        local: IPAddress,
        underlay_index: int,
        port: int,
        mtu: int,
        learning: bool = False,
    ) -> None:
        ns = self._open()
        made = self._create(ns, name, "vxlan", 0)
        underlay = ns.get(underlay_index)
        for other in ns.links.values():
            if other.vxlan is not None and (other.vxlan.vni, other.vxlan.port) == (vni, port):
                raise _refuse(errno.EEXIST)
        # the kernel clamps a larger MTU to what the underlay leaves (vxlan_dev_configure)
        room = underlay.mtu - (VXLAN6_HEADROOM if local.version == 6 else VXLAN_HEADROOM)
        if mtu:
            _check_mtu(mtu)
        made.mtu = min(mtu, room) if mtu else room
        made.vxlan = VxlanInfo(vni, local, underlay_index, port, learning)
        self._insert(ns, made)

    def add_ifb(self, name: str, mtu: int, txqlen: int) -> None:
        ns = self._open()
        made = self._create(ns, name, "ifb", mtu)
        made.txqlen = txqlen
        self._insert(ns, made)

    def add_tap(self, name: str, multi_queue: bool = False) -> None:
        """What TUNSETIFF (IFF_TAP) and TUNSETPERSIST on /dev/net/tun do in this namespace
        (pycni.plugins.main.tap.tun.create_tap; not a Kernel call): a ``tun``-kind link, down,
        MTU 1500, a random MAC. A name held by a tap of the same queue mode is attached to (no
        new link); by a tap of the other mode or by any other link, EINVAL (tun_set_iff).
        Owner, group and the vnet header are not modelled: no Kernel call reads them."""
        ns = self._open()
        taken = ns.by_name(name)
        if taken is not None:
            if taken.kind != "tun" or taken.tun_multi_queue != multi_queue:
                raise _refuse(errno.EINVAL)
            return
        made = self._create(ns, name, "tun", 0)
        made.tun_multi_queue = multi_queue
        self._insert(ns, made)

    def set_link(self, index: int, **changes: Unpack[LinkChanges]) -> None:
        """Applied in the order of the kernel's do_setlink, each step for good: a later
        refusal leaves the earlier changes made (a link moved, then not renamed)."""
        name, netns_fd, mac = changes.get("name"), changes.get("netns_fd"), changes.get("mac")
        mtu, alias, up = changes.get("mtu"), changes.get("alias"), changes.get("up")
        master, txqlen = changes.get("master"), changes.get("txqlen")
        flags, flag_mask = changes.get("flags", 0), changes.get("flag_mask", 0)
        ns = self._open()
        link = ns.get(index)
        if name is not None:
            _check_name(name)
        if netns_fd is not None:
            ns, link = self._move(ns, link, ns.host.resolve(netns_fd), name)
        if mac is not None:
            link.mac, link.mac_set = _check_mac(mac), True
            self._bridge_mac(ns, link.master)
        if mtu is not None:
            self._set_mtu(ns, link, mtu)
        if name is not None and name != link.name:
            if ns.by_name(name) is not None:
                raise _refuse(errno.EEXIST)
            link.name = name
        if alias is not None:
            link.alias = alias
        if flag_mask & IFF_PROMISC:
            link.promisc = bool(flags & IFF_PROMISC)
        if up is not None or flag_mask & IFF_UP:
            self._set_up(ns, link, bool(up) if up is not None else bool(flags & IFF_UP))
        if master is not None:
            self._set_master(ns, link, master)
        if txqlen is not None:
            link.txqlen = txqlen

    def _move(
        self, ns: FakeNetns, link: _Link, target: FakeNetns, name: str | None
    ) -> tuple[FakeNetns, _Link]:
        if target is ns:
            return ns, link
        if link.kind in NETNS_LOCAL:
            raise _refuse(errno.EINVAL)
        if target.by_name(link.name) is not None:
            if name is None or target.by_name(name) is not None:
                raise _refuse(errno.EEXIST)
            link.name = name
        self._set_up(ns, link, False)
        if link.master:
            self._set_master(ns, link, 0)
        self._forget(ns, link.index)
        del ns.links[link.index]
        old = link.index
        link.ipv4_conf, link.ipv6_conf = {}, {}  # re-registered: the target's defaults
        self._insert(target, link, wanted=old)
        for other_ns in ns.host.namespaces.values():  # whoever points at it follows
            for other in other_ns.links.values():
                if other.peer == (ns, old):
                    other.peer = (target, link.index)
        return target, link

    def _set_mtu(self, ns: FakeNetns, link: _Link, mtu: int) -> None:
        maximum = ETH_MAX_MTU
        if link.kind == "macvlan" and link.peer is not None:
            lower_ns, lower_index = link.peer
            maximum = lower_ns.get(lower_index).mtu
        if link.kind == "tun":
            maximum = TAP_MAX_MTU
        _check_mtu(mtu, maximum)
        link.mtu = mtu
        if link.kind == "bridge":
            link.mtu_by_user = True
        self._bridge_mtu(ns, link.master)

    def _bridge_mtu(self, ns: FakeNetns, bridge_index: int) -> None:
        """br_mtu_auto_adjust: a bridge without a user-set MTU takes its ports' smallest."""
        bridge = ns.links.get(bridge_index)
        if bridge is None or bridge.kind != "bridge" or bridge.mtu_by_user:
            return
        ports = [p.mtu for p in ns.links.values() if p.master == bridge_index]
        bridge.mtu = min(ports) if ports else DEFAULT_MTU

    def _bridge_mac(self, ns: FakeNetns, bridge_index: int) -> None:
        """br_stp_recalculate_bridge_id: a bridge without a user-set MAC takes its ports'
        smallest."""
        bridge = ns.links.get(bridge_index)
        if bridge is None or bridge.kind != "bridge" or bridge.mac_set:
            return
        ports = [p.mac for p in ns.links.values() if p.master == bridge_index]
        if ports:
            bridge.mac = min(ports, key=_mac_bytes)

    def _set_master(self, ns: FakeNetns, link: _Link, master: int) -> None:
        if link.master == master:
            return
        if link.master:
            old = link.master
            was_vrf = self._l3mdev_table(ns, link.index) is not None
            link.master, link.hairpin, link.isolated, link.vlans = 0, False, False, []
            self._bridge_mtu(ns, old)
            if was_vrf:
                self._cycle(ns, link)  # vrf_del_slave cycles it: its routes back in main
        if not master:
            return
        upper = ns.links.get(master)
        if upper is None:
            raise _refuse(errno.EINVAL)  # do_set_master: no such upper device
        if upper.kind not in ("bridge", "vrf"):
            raise _refuse(errno.EOPNOTSUPP)  # no ndo_add_slave
        if link.loopback or link is upper:
            raise _refuse(errno.EINVAL)
        link.master = master
        if upper.kind == "vrf":
            self._cycle(ns, link)  # do_vrf_add_slave: down and up, routes into its table
            return
        if upper.vlan_filtering:
            link.vlans = [1]
        self._bridge_mtu(ns, master)
        self._bridge_mac(ns, master)

    def _cycle(self, ns: FakeNetns, link: _Link) -> None:
        """A VRF's cycle_netdev: an up link goes down and up again."""
        if link.up:
            self._set_up(ns, link, False)
            self._set_up(ns, link, True)

    @staticmethod
    def _l3mdev_table(ns: FakeNetns, index: int) -> int | None:
        """The table of the VRF ``index`` is enslaved to, None if it is in none."""
        link = ns.links.get(index)
        master = ns.links.get(link.master) if link is not None and link.master else None
        return master.vrf_table if master is not None and master.kind == "vrf" else None

    def _set_up(self, ns: FakeNetns, link: _Link, up: bool) -> None:
        if link.up == up:
            return
        link.up = up
        if up:
            if link.loopback:
                for interface in (
                    ipaddress.ip_interface("127.0.0.1/8"),
                    ipaddress.ip_interface("::1/128"),
                ):
                    if not self._find_address(link.index, interface):
                        ns.addresses.append(
                            Address(link.index, interface, IFA_F_PERMANENT, RT_SCOPE_HOST)
                        )
            for address in list(ns.addresses):
                if address.index == link.index:
                    self._prefix_route(address, add=True)
            return
        # down: every route through it goes, in every table (fib_sync_down_dev, and
        # rt6_sync_down_dev), and so do its IPv6 addresses unless keep_addr_on_down is set
        ns.routes = [r for r in ns.routes if r.oif != link.index]
        if _ipv6_conf(link, "keep_addr_on_down") <= 0:
            self._drop_ipv6_addresses(ns, link.index)

    @staticmethod
    def _drop_ipv6_addresses(ns: FakeNetns, index: int) -> None:
        ns.addresses = [
            a for a in ns.addresses if not (a.index == index and a.interface.version == 6)
        ]
        ns.routes = [r for r in ns.routes if not (r.oif == index and r.dst.version == 6)]

    def _forget(self, ns: FakeNetns, index: int) -> None:
        """What goes with a link that leaves the namespace: its addresses, routes,
        neighbours, FDB entries and tc objects."""
        ns.addresses = [a for a in ns.addresses if a.index != index]
        ns.routes = [r for r in ns.routes if r.oif != index]
        ns.neighbours = {k: v for k, v in ns.neighbours.items() if k[0] != index}
        ns.fdb = {k: v for k, v in ns.fdb.items() if k[0] != index}
        ns.qdiscs.pop(index, None)
        ns.redirects.pop(index, None)

    def delete_link(self, index: int) -> None:
        ns = self._open()
        link = ns.get(index)
        if link.loopback:
            raise _refuse(errno.EOPNOTSUPP)  # lo has no rtnl_link_ops
        self._unregister(ns, link)

    def _unregister(self, ns: FakeNetns, link: _Link) -> None:
        if link.index not in ns.links:
            return
        if link.master:
            self._set_master(ns, link, 0)
        for port in list(ns.links.values()):
            if port.master == link.index:
                port.master = 0
                if link.kind == "vrf":
                    self._cycle(ns, port)  # vrf_dellink releases each port: vrf_del_slave
        self._forget(ns, link.index)
        del ns.links[link.index]
        if link.kind == "veth" and link.peer is not None:
            peer_ns, peer_index = link.peer
            peer = peer_ns.links.get(peer_index)
            if peer is not None:
                self._unregister(peer_ns, peer)
        for other_ns in list(ns.host.namespaces.values()):  # macvlans of this link
            for other in list(other_ns.links.values()):
                if other.kind == "macvlan" and other.peer == (ns, link.index):
                    self._unregister(other_ns, other)

    def set_ipv4_conf(self, index: int, values: dict[int, int]) -> None:
        self._open().get(index).ipv4_conf.update(values)

    def ipv4_conf(self, index: int) -> dict[int, int]:
        """What set_ipv4_conf stored (the fake's window on /proc/sys/net/ipv4/conf/<dev>)."""
        return dict(self._open().get(index).ipv4_conf)

    def forwarding(self, family: int) -> int:
        return self._open().forwarding.get(family, 0)

    def set_bridge_port(self, index: int, hairpin: bool, isolated: bool) -> None:
        link = self._open().get(index)
        if not link.master:
            raise _refuse(errno.EOPNOTSUPP)  # rtnl_bridge_setlink: no master to ask
        link.hairpin, link.isolated = hairpin, isolated

    def bridge_port(self, index: int) -> tuple[bool, bool]:
        """A port's (hairpin, isolated) flags, as set_bridge_port left them."""
        link = self._open().get(index)
        return link.hairpin, link.isolated

    def _vlan_port(self, index: int) -> _Link:
        ns = self._open()
        link = ns.get(index)
        bridge = ns.links.get(link.master)
        if bridge is None or not bridge.vlan_filtering:
            raise _refuse(errno.EOPNOTSUPP)
        return link

    def port_vlans(self, index: int) -> list[int]:
        return list(self._vlan_port(index).vlans)

    def add_port_vlan(self, index: int, vid: int, flags: int = 0) -> None:
        if not 1 <= vid <= 4094:
            raise _refuse(errno.EINVAL)
        port = self._vlan_port(index)
        if vid not in port.vlans:
            port.vlans.append(vid)

    def delete_port_vlan(self, index: int, vid: int) -> None:
        port = self._vlan_port(index)
        if vid not in port.vlans:
            raise _refuse(errno.ENOENT)
        port.vlans.remove(vid)

    # ------------------------------------------------------------ addresses

    def addresses(self, index: int = 0, family: int = 0) -> list[Address]:
        return [
            a
            for a in self._open().addresses
            if (not index or a.index == index) and (not family or a.family == family)
        ]

    def _find_address(self, index: int, interface: IPInterface) -> Address | None:
        for a in self.ns.addresses:
            if a.index != index or a.interface.ip != interface.ip:
                continue
            if a.interface.version == 6 or a.interface.network.prefixlen == _prefixlen(interface):
                return a
        return None

    def add_address(self, index: int, interface: IPInterface, flags: int = 0) -> None:
        ns = self._open()
        link = ns.get(index)
        if interface.version == 6 and _ipv6_conf(link, "disable_ipv6") > 0:
            raise _refuse(errno.EACCES)  # ipv6_add_addr: IPv6 is off on the device
        if self._find_address(index, interface) is not None:
            raise _refuse(errno.EEXIST)
        scope = 0
        if interface.version == 6 and interface.ip.is_link_local:
            scope = RT_SCOPE_LINK
        elif interface.ip.is_loopback:
            scope = RT_SCOPE_HOST
        added = Address(index, interface, flags | IFA_F_PERMANENT, scope)
        ns.addresses.append(added)
        if link.up:
            self._prefix_route(added, add=True)

    def delete_address(self, index: int, interface: IPInterface) -> None:
        ns = self._open()
        ns.get(index)
        found = self._find_address(index, interface)
        if found is None:
            raise _refuse(errno.EADDRNOTAVAIL)
        ns.addresses.remove(found)
        self._prefix_route(found, add=False)

    def _prefix_route(self, address: Address, add: bool) -> None:
        """The route the kernel keeps for an address's prefix on its link (proto kernel)."""
        interface = address.interface
        table = self._l3mdev_table(self.ns, address.index) or MAIN_TABLE  # a VRF port's: its
        if interface.network.prefixlen == interface.max_prefixlen or interface.ip.is_loopback:
            return
        if interface.version == 4:
            route = Route(
                dst=_prefix(interface),
                oif=address.index,
                table=table,
                proto=RTPROT_KERNEL,
                scope=RT_SCOPE_LINK,
                type=RTN_UNICAST,
                prefsrc=interface.ip,
            )
        else:
            route = Route(
                dst=_prefix(interface),
                oif=address.index,
                table=table,
                proto=RTPROT_KERNEL,
                scope=0,
                type=RTN_UNICAST,
                priority=IPV6_PREFIX_METRIC,
            )
        routes = self.ns.routes
        if add and route not in routes:
            routes.append(route)
        elif not add and route in routes:
            routes.remove(route)

    # ------------------------------------------------------------ routes

    def routes(self, family: int, table: int = 0, oif: int = 0) -> list[Route]:
        return [
            r
            for r in self._open().routes
            if r.family == family and (not table or r.table == table) and (not oif or r.oif == oif)
        ]

    def route_to(self, dst: IPAddress) -> list[Route]:
        ns = self._open()
        best: Route | None = None
        for r in ns.routes:
            if r.table != MAIN_TABLE or r.dst.version != dst.version or dst not in r.dst:
                continue
            if best is None or r.dst.prefixlen > best.dst.prefixlen:
                best = r
        if best is None:
            raise _refuse(errno.ENETUNREACH)
        host = ipaddress.ip_network(f"{dst}/{dst.max_prefixlen}")
        return [
            Route(
                dst=host,
                oif=best.oif,
                gateway=best.gateway,
                table=MAIN_TABLE,
                proto=0,
                scope=0,
                type=RTN_UNICAST,
                flags=0,
                prefsrc=best.prefsrc,
            )
        ]

    def _normal(self, route: Route) -> Route:
        """The route as the kernel stores it: defaults filled in."""
        priority = route.priority or None
        if route.dst.version == 6 and priority is None:
            priority = IPV6_DEFAULT_METRIC
        return replace(
            route,
            table=route.table or MAIN_TABLE,
            proto=RTPROT_STATIC if route.proto is None else route.proto,
            scope=route.scope or 0,
            type=RTN_UNICAST if route.type is None else route.type,
            priority=priority,
        )

    def _check_route(self, route: Route) -> None:
        ns = self.ns
        if route.oif:
            link = ns.get(route.oif)
            onlink = bool(route.flags & RTNH_F_ONLINK)
            if not link.up and (route.gateway is None or onlink or route.dst.version == 6):
                raise _refuse(errno.ENETDOWN)
        if route.gateway is not None and route.dst.version == 4:
            if route.flags & RTNH_F_ONLINK:
                return
            # fib_check_nh_v4_gw: the route's own table, then a full lookup (main, or the
            # VRF's table for a VRF port, by the l3mdev rule)
            tables = {route.table, MAIN_TABLE, self._l3mdev_table(ns, route.oif)}
            for r in ns.routes:
                if (
                    r.table in tables
                    and r.dst.version == 4
                    and route.gateway in r.dst
                    and r.gateway is None
                    and (r.scope or 0) >= RT_SCOPE_LINK
                    and (not route.oif or r.oif == route.oif)
                ):
                    return
            raise _refuse(errno.ENETUNREACH)

    @staticmethod
    def _same_key(a: Route, b: Route) -> bool:
        return (a.table, a.dst, a.priority) == (b.table, b.dst, b.priority)

    def add_route(self, route: Route) -> None:
        self._open()
        stored = self._normal(route)
        self._check_route(stored)
        if any(self._same_key(r, stored) for r in self.ns.routes):
            raise _refuse(errno.EEXIST)
        self.ns.routes.append(stored)

    def replace_route(self, route: Route) -> None:
        self._open()
        stored = self._normal(route)
        self._check_route(stored)
        routes = self.ns.routes
        for i, r in enumerate(routes):
            if self._same_key(r, stored):
                routes[i] = stored
                return
        routes.append(stored)

    def delete_route(self, route: Route) -> None:
        ns = self._open()
        table = route.table or MAIN_TABLE
        for r in ns.routes:
            if (
                r.dst == route.dst
                and r.table == table
                and (not route.oif or r.oif == route.oif)
                and (route.gateway is None or r.gateway == route.gateway)
                and (not route.proto or r.proto == route.proto)
                and (not route.scope or r.scope == route.scope)
                and (not route.type or r.type == route.type)
                and (not route.priority or r.priority == route.priority)
            ):
                ns.routes.remove(r)
                return
        raise _refuse(errno.ESRCH)

    # ------------------------------------------------------------ neighbours and FDB

    def neighbours(self, index: int, family: int) -> list[Neighbour]:
        ns = self._open()
        return [
            Neighbour(i, address, mac, NUD_PERMANENT)
            for (i, address), mac in ns.neighbours.items()
            if i == index and family_of(address.version) == family
        ]

    def set_neighbour(self, index: int, address: IPAddress, mac: str) -> None:
        ns = self._open()
        ns.get(index)
        ns.neighbours[(index, address)] = ":".join(f"{b:02x}" for b in _mac_bytes(mac))

    def delete_neighbour(self, index: int, address: IPAddress) -> None:
        ns = self._open()
        ns.get(index)
        if ns.neighbours.pop((index, address), None) is None:
            raise _refuse(errno.ENOENT)

    def fdb_entries(self, index: int) -> list[FdbEntry]:
        ns = self._open()
        return [FdbEntry(i, mac, remote) for (i, mac), remote in ns.fdb.items() if i == index]

    def set_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        ns = self._open()
        ns.get(index)
        ns.fdb[(index, mac.lower())] = remote

    def delete_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        ns = self._open()
        ns.get(index)
        if ns.fdb.get((index, mac.lower())) != remote:
            raise _refuse(errno.ENOENT)
        del ns.fdb[(index, mac.lower())]

    # ------------------------------------------------------------ policy rules

    def rules(self, family: int) -> list[Rule]:
        found = [r for r in self._open().rules if r.family == family]
        return sorted(found, key=lambda r: r.priority or 0)

    def add_rule(self, rule: Rule) -> None:
        ns = self._open()
        priority = rule.priority
        if priority is None:  # fib_default_rule_pref: just below the first non-zero one
            prefs = sorted(r.priority for r in ns.rules if r.family == rule.family and r.priority)
            priority = prefs[0] - 1 if prefs else 0
        stored = replace(rule, priority=priority)
        if stored in ns.rules:
            raise _refuse(errno.EEXIST)
        ns.rules.append(stored)

    def delete_rule(self, rule: Rule) -> None:
        ns = self._open()
        for r in self.rules(rule.family):
            if (
                (not rule.table or r.table == rule.table)
                and (rule.src is None or r.src == rule.src)
                and (rule.priority is None or r.priority == rule.priority)
            ):
                ns.rules.remove(r)
                return
        raise _refuse(errno.ENOENT)

    # ------------------------------------------------------------ traffic control

    def qdiscs(self, index: int) -> list[Qdisc]:
        ns = self._open()
        ns.get(index)
        mine = list(ns.qdiscs.get(index, []))
        if not any(q.parent == TC_H_ROOT for q in mine):
            mine.insert(0, Qdisc(index, "noqueue", 0, TC_H_ROOT))
        return mine

    def _add_qdisc(self, qdisc: Qdisc) -> None:
        ns = self._open()
        ns.get(qdisc.index)
        mine = ns.qdiscs.setdefault(qdisc.index, [])
        if any(q.parent == qdisc.parent for q in mine):
            raise _refuse(errno.EEXIST)
        mine.append(qdisc)

    def add_tbf(self, index: int, handle: int, tbf: Tbf) -> None:
        self._add_qdisc(Qdisc(index, "tbf", handle, TC_H_ROOT, tbf))

    def add_ingress(self, index: int) -> None:
        self._add_qdisc(Qdisc(index, "ingress", INGRESS_HANDLE, TC_H_INGRESS))

    def redirect_ingress(self, index: int, target_index: int) -> None:
        ns = self._open()
        ns.get(target_index)
        if not any(q.parent == TC_H_INGRESS for q in ns.qdiscs.get(index, [])):
            raise _refuse(errno.EINVAL)  # no ingress qdisc to hang the filter on
        ns.redirects[index] = target_index

    def redirect_of(self, index: int) -> int | None:
        """The link ``index``'s ingress traffic is redirected to, if any."""
        return self._open().redirects.get(index)

    def delete_qdisc(self, index: int, parent: int) -> None:
        ns = self._open()
        ns.get(index)
        mine = ns.qdiscs.get(index, [])
        for q in mine:
            if q.parent == parent:
                mine.remove(q)
                if parent == TC_H_INGRESS:
                    ns.redirects.pop(index, None)
                return
        raise _refuse(errno.ENOENT)

    # ------------------------------------------------------------ namespaces

    def netns_id(self, netns_fd: int) -> int | None:
        ns = self._open()
        other = ns.host.resolve(netns_fd)
        return ns.nsids.get(other.fd)


# ------------------------------------------------------------------ sysctls

# net/ipv4/conf/<dev>/ entries the fake knows, by IPV4_DEVCONF_* id (include/uapi/linux/ip.h):
# the same state set_ipv4_conf writes, as in the kernel
IPV4_CONF_IDS = {"proxy_arp": 3, "arp_ignore": 19, "arp_notify": 22, "route_localnet": 26}
# net/ipv6/conf/<dev>/ entries the fake knows, with a new namespace's defaults (lo differs)
IPV6_CONF_DEFAULTS = {
    "accept_ra": 1,
    "accept_dad": 1,
    "autoconf": 1,
    "disable_ipv6": 0,
    "enhanced_dad": 1,
    "keep_addr_on_down": 0,
    "ndisc_notify": 0,
}
IPV6_LO_DEFAULTS = {"accept_dad": -1}


def _ipv6_conf(link: _Link, knob: str) -> int:
    if knob in link.ipv6_conf:
        return link.ipv6_conf[knob]
    if link.loopback and knob in IPV6_LO_DEFAULTS:
        return IPV6_LO_DEFAULTS[knob]
    return IPV6_CONF_DEFAULTS[knob]


class FakeSysctl:
    """The /proc/sys/net entries of one FakeNetns (pycni.net.sysctl.Sysctl): the forwarding
    switches (the same state ``Kernel.forwarding`` reads) and the per-device entries named in
    IPV4_CONF_IDS and IPV6_CONF_DEFAULTS, which exist while their link does (ENOENT
    otherwise) and start again from the defaults when it changes namespace. Writing
    disable_ipv6=1 removes the link's IPv6 addresses, as the kernel does. Names are in slash
    form below /proc/sys. An entry the fake does not model raises LookupError (not an
    OSError, which a best-effort caller would swallow): a test that needs it fails loudly."""

    def __init__(self, ns: FakeNetns) -> None:
        self.ns = ns

    def _where(self, name: str) -> tuple[str, _Link | None, str]:
        """(family, link or None for the namespace-wide switch, knob)."""
        if name == "net/ipv4/ip_forward":
            return "ipv4", None, "forwarding"
        if name == "net/ipv6/conf/all/forwarding":
            return "ipv6", None, "forwarding"
        parts = name.split("/")
        if len(parts) == 5 and parts[:2] == ["net", "ipv4"] and parts[2] == "conf":
            known = parts[4] in IPV4_CONF_IDS
        elif len(parts) == 5 and parts[:3] == ["net", "ipv6", "conf"]:
            known = parts[4] in IPV6_CONF_DEFAULTS
        else:
            known = False
        if not known or parts[3] in ("all", "default"):
            raise LookupError(f"FakeSysctl does not model /proc/sys/{name}")
        link = self.ns.by_name(parts[3])
        if link is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        return parts[1], link, parts[4]

    def read(self, name: str) -> str:
        family, link, knob = self._where(name)
        if link is None:
            return str(self.ns.forwarding[AF_INET if family == "ipv4" else AF_INET6])
        if family == "ipv4":
            return str(link.ipv4_conf.get(IPV4_CONF_IDS[knob], 0))
        return str(_ipv6_conf(link, knob))

    def write(self, name: str, value: str) -> None:
        family, link, knob = self._where(name)
        try:
            number = int(value.strip())
        except ValueError:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), name) from None
        if link is None:
            self.ns.forwarding[AF_INET if family == "ipv4" else AF_INET6] = int(number != 0)
        elif family == "ipv4":
            link.ipv4_conf[IPV4_CONF_IDS[knob]] = number
        else:
            link.ipv6_conf[knob] = number
            if knob == "disable_ipv6" and number > 0:
                FakeKernel._drop_ipv6_addresses(self.ns, link.index)


def _index(link: _Link) -> int:
    return link.index


def _prefixlen(interface: IPInterface) -> int:
    return interface.network.prefixlen


if TYPE_CHECKING:
    _check: type[Kernel] = FakeKernel  # mypy proves FakeKernel satisfies the Protocol
