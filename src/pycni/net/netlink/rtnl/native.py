"""NativeKernel: pycni.net.netlink.kernel.Kernel on a raw rtnetlink socket, the only one.

Measured (docs/benchmarks.md): pyroute2 0.9 runs an asyncio loop for every synchronous call, a
bridge ADD makes dozens of them, and importing it was most of an in-process plugin run. So every
Kernel call is encoded and decoded here with ``struct``: links, bridge port flags and VLANs,
IPv4 device settings and the forwarding switch, addresses, routes, policy rules and namespace
ids (codec.py), neighbours and FDB entries (neigh_codec.py), the bandwidth plugin's tc objects
(tc_codec.py). Every request goes on the one socket made when the client was opened, so it acts
on that namespace whichever namespace the calling thread is in by then.
"""

from __future__ import annotations

from pycni.net.netlink.kernel import (
    CLASS_1_1,
    ETH_P_ALL,
    INGRESS_HANDLE,
    TC_H_INGRESS,
    TC_H_ROOT,
    Address,
    FdbEntry,
    IPAddress,
    IPInterface,
    Link,
    Neighbour,
    NetlinkError,
    Qdisc,
    Route,
    Rule,
    Tbf,
    broadcast_of,
)
from pycni.net.netlink.rtnl import codec as c
from pycni.net.netlink.rtnl import tc_codec as tc
from pycni.net.netlink.rtnl.wire import (
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_ECHO,
    NLM_F_EXCL,
    NLM_F_REPLACE,
    Socket,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Unpack

    from pycni.net.netlink.kernel import LinkChanges

_CREATE = NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
_REPLACE = NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE


def dump_addresses(sock: Socket, index: int = 0, family: int = 0) -> list[Address]:
    """Addresses of one link and family (0: any), filtered by the kernel (the socket has
    NETLINK_GET_STRICT_CHK) and again here for kernels that do not filter.

    Without the kernel's filter every address of the namespace comes back: on a node with
    hundreds of pods (each host veth has an IPv6 link-local address) that dump grows with
    the pods, on every ADD's gateway check (docs/benchmarks.md)."""
    out = []
    for kind, payload in sock.request(c.RTM_GETADDR, NLM_F_DUMP, c.dump_addresses(index, family)):
        if kind != c.RTM_NEWADDR:
            continue
        found = c.decode_address(payload)
        if found is None:
            continue
        if (index and found.index != index) or (family and found.family != family):
            continue
        out.append(found)
    return out


class NativeKernel:
    """The Kernel of the namespace of the thread that created it."""

    def __init__(self) -> None:
        self._sock = Socket()

    # ------------------------------------------------------------ lifecycle

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        self._sock.close()

    def _do(self, kind: int, flags: int, body: bytes) -> list[tuple[int, bytes]]:
        return self._sock.request(kind, flags, body)

    # ------------------------------------------------------------ links

    def _get_link(self, index: int = 0, name: str = "") -> Link:
        for kind, payload in self._do(c.RTM_GETLINK, 0, c.get_link(index, name)):
            if kind == c.RTM_NEWLINK:
                return c.decode_link(payload)
        raise NetlinkError(19)  # ENODEV

    def link(self, index: int) -> Link:
        return self._get_link(index=index)

    def find_link(self, name: str) -> Link | None:
        try:
            return self._get_link(name=name)
        except NetlinkError as exc:
            if exc.no_such_link:
                return None
            raise

    def links(self) -> list[Link]:
        replies = self._do(c.RTM_GETLINK, NLM_F_DUMP, c.ifinfo() + c.EXT_MASK)
        return [c.decode_link(p) for t, p in replies if t == c.RTM_NEWLINK]

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
        body = c.new_veth(name, peer_name, peer_netns_fd, mtu, peer_mac, master, txqlen)
        # NLM_F_ECHO: the kernel (6.3+) answers with the new link, which spares a lookup
        for kind, payload in self._do(c.RTM_NEWLINK, _CREATE | NLM_F_ECHO, body):
            if kind == c.RTM_NEWLINK:
                found = c.decode_link(payload)
                if found.name == name:
                    return found.index
        return 0

    def set_ipv4_conf(self, index: int, values: dict[int, int]) -> None:
        self._do(c.RTM_NEWLINK, NLM_F_ACK, c.set_ipv4_conf(index, values))

    def forwarding(self, family: int) -> int:
        for kind, payload in self._do(c.RTM_GETNETCONF, 0, c.get_netconf(family)):
            if kind == c.RTM_NEWNETCONF:
                value = c.decode_forwarding(payload)
                if value is not None:
                    return value
        raise NetlinkError(95)  # EOPNOTSUPP: the kernel sent no forwarding setting

    def add_bridge(self, name: str, mtu: int = 0, vlan_filtering: bool = False) -> None:
        self._do(c.RTM_NEWLINK, _CREATE, c.new_bridge(name, mtu, vlan_filtering))

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
        body = c.new_macvlan(name, master, mode, netns_fd, mtu, mac, bc_queue_len)
        self._do(c.RTM_NEWLINK, _CREATE, body)

    def add_ipvlan(
        self, name: str, master: int, mode: int, flags: int, netns_fd: int, mtu: int = 0
    ) -> None:
        self._do(c.RTM_NEWLINK, _CREATE, c.new_ipvlan(name, master, mode, flags, netns_fd, mtu))

    def add_vlan(self, name: str, master: int, vlan_id: int, netns_fd: int, mtu: int = 0) -> None:
        self._do(c.RTM_NEWLINK, _CREATE, c.new_vlan(name, master, vlan_id, netns_fd, mtu))

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
        body = c.new_vxlan(name, vni, local, underlay_index, port, mtu, learning)
        self._do(c.RTM_NEWLINK, _CREATE, body)

    def add_ifb(self, name: str, mtu: int, txqlen: int) -> None:
        self._do(c.RTM_NEWLINK, _CREATE, c.new_link("ifb", name, mtu, txqlen=txqlen))

    def add_dummy(self, name: str, mtu: int = 0) -> None:
        self._do(c.RTM_NEWLINK, _CREATE, c.new_link("dummy", name, mtu))

    def add_vrf(self, name: str, table: int) -> None:
        self._do(c.RTM_NEWLINK, _CREATE, c.new_vrf(name, table))

    def set_link(self, index: int, **changes: Unpack[LinkChanges]) -> None:
        self._do(c.RTM_NEWLINK, NLM_F_ACK, c.set_link(index, **changes))

    def delete_link(self, index: int) -> None:
        self._do(c.RTM_DELLINK, NLM_F_ACK, c.ifinfo(index))

    def set_bridge_port(self, index: int, hairpin: bool, isolated: bool) -> None:
        self._do(c.RTM_SETLINK, NLM_F_ACK, c.bridge_port(index, hairpin, isolated))

    def port_vlans(self, index: int) -> list[int]:
        replies = self._do(c.RTM_GETLINK, NLM_F_DUMP, c.dump_bridge_vlans())
        for kind, payload in replies:
            if kind != c.RTM_NEWLINK:
                continue
            port, vlans = c.decode_bridge_vlans(payload)
            if port == index:
                return [vid for vid, _flags in vlans]
        return []

    def add_port_vlan(self, index: int, vid: int, flags: int = 0) -> None:
        self._do(c.RTM_SETLINK, NLM_F_ACK, c.port_vlan(index, vid, flags))

    def delete_port_vlan(self, index: int, vid: int) -> None:
        self._do(c.RTM_DELLINK, NLM_F_ACK, c.port_vlan(index, vid))

    # ------------------------------------------------------------ addresses

    def addresses(self, index: int = 0, family: int = 0) -> list[Address]:
        return dump_addresses(self._sock, index, family)

    def add_address(self, index: int, interface: IPInterface, flags: int = 0) -> None:
        body = c.address(index, interface, flags, broadcast_of(interface))
        self._do(c.RTM_NEWADDR, _CREATE, body)

    def delete_address(self, index: int, interface: IPInterface) -> None:
        self._do(c.RTM_DELADDR, NLM_F_ACK, c.address(index, interface))

    # ------------------------------------------------------------ routes

    def routes(self, family: int, table: int = 0, oif: int = 0) -> list[Route]:
        try:
            replies = self._do(c.RTM_GETROUTE, NLM_F_DUMP, c.dump_routes(family, table, oif))
        except NetlinkError as exc:
            if exc.no_such_link:  # no such table (ENOENT) or link (ENODEV): no routes
                return []
            raise
        out = []
        for kind, payload in replies:
            if kind != c.RTM_NEWROUTE:
                continue
            found = c.decode_route(payload)
            if found is None or found.family != family:
                continue
            if (table and found.table != table) or (oif and found.oif != oif):
                continue
            out.append(found)
        return out

    def route_to(self, dst: IPAddress) -> list[Route]:
        replies = self._do(c.RTM_GETROUTE, 0, c.get_route(dst))
        decoded = (c.decode_route(p) for t, p in replies if t == c.RTM_NEWROUTE)
        return [r for r in decoded if r is not None]

    def add_route(self, route: Route) -> None:
        self._do(c.RTM_NEWROUTE, _CREATE, c.route(route, deleting=False))

    def replace_route(self, route: Route) -> None:
        self._do(c.RTM_NEWROUTE, _REPLACE, c.route(route, deleting=False))

    def delete_route(self, route: Route) -> None:
        self._do(c.RTM_DELROUTE, NLM_F_ACK, c.route(route, deleting=True))

    # ------------------------------------------------------------ neighbours and FDB entries

    def neighbours(self, index: int, family: int) -> list[Neighbour]:
        from pycni.net.netlink.rtnl import neigh_codec as nd  # cold path: only the cluster's calls

        replies = self._do(nd.RTM_GETNEIGH, NLM_F_DUMP, nd.dump_neighbours(index, family))
        found = (nd.decode_neighbour(p) for t, p in replies if t == nd.RTM_NEWNEIGH)
        return [n for n in found if n is not None and n.index == index]  # older kernels: all

    def set_neighbour(self, index: int, address: IPAddress, mac: str) -> None:
        from pycni.net.netlink.rtnl import neigh_codec as nd  # cold path: only the cluster's calls

        self._do(nd.RTM_NEWNEIGH, _REPLACE, nd.neighbour(index, address, mac))

    def delete_neighbour(self, index: int, address: IPAddress) -> None:
        from pycni.net.netlink.rtnl import neigh_codec as nd  # cold path: only the cluster's calls

        self._do(nd.RTM_DELNEIGH, NLM_F_ACK, nd.neighbour(index, address))

    def fdb_entries(self, index: int) -> list[FdbEntry]:
        from pycni.net.netlink.rtnl import neigh_codec as nd  # cold path: only the cluster's calls

        replies = self._do(nd.RTM_GETNEIGH, NLM_F_DUMP, nd.dump_fdb(index))
        found = (nd.decode_fdb(p) for t, p in replies if t == nd.RTM_NEWNEIGH)
        return [e for e in found if e is not None and e.index == index]

    def set_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        from pycni.net.netlink.rtnl import neigh_codec as nd  # cold path: only the cluster's calls

        self._do(nd.RTM_NEWNEIGH, _REPLACE, nd.fdb(index, mac, remote))

    def delete_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        from pycni.net.netlink.rtnl import neigh_codec as nd  # cold path: only the cluster's calls

        self._do(nd.RTM_DELNEIGH, NLM_F_ACK, nd.fdb(index, mac, remote, deleting=True))

    # ------------------------------------------------------------ policy rules and tc

    def rules(self, family: int) -> list[Rule]:
        replies = self._do(c.RTM_GETRULE, NLM_F_DUMP, c.dump_rules(family))
        return [c.decode_rule(p) for t, p in replies if t == c.RTM_NEWRULE]

    def add_rule(self, rule: Rule) -> None:
        self._do(c.RTM_NEWRULE, _CREATE, c.rule(rule))

    def delete_rule(self, rule: Rule) -> None:
        self._do(c.RTM_DELRULE, NLM_F_ACK, c.rule(rule))

    def qdiscs(self, index: int) -> list[Qdisc]:
        replies = self._do(tc.RTM_GETQDISC, NLM_F_DUMP, tc.tcmsg(index))
        found = [tc.decode_qdisc(p) for t, p in replies if t == tc.RTM_NEWQDISC]
        return [q for q in found if q.index == index]  # older kernels dump every link's

    def add_tbf(self, index: int, handle: int, tbf: Tbf) -> None:
        self._do(tc.RTM_NEWQDISC, _CREATE, tc.tbf(index, handle, TC_H_ROOT, tbf))

    def add_ingress(self, index: int) -> None:
        body = tc.ingress(index, INGRESS_HANDLE, TC_H_INGRESS)
        self._do(tc.RTM_NEWQDISC, _CREATE, body)

    def redirect_ingress(self, index: int, target_index: int) -> None:
        body = tc.redirect_filter(index, INGRESS_HANDLE, 1, ETH_P_ALL, CLASS_1_1, target_index)
        self._do(tc.RTM_NEWTFILTER, _CREATE, body)

    def delete_qdisc(self, index: int, parent: int) -> None:
        self._do(tc.RTM_DELQDISC, NLM_F_ACK, tc.tcmsg(index, 0, parent))

    # ------------------------------------------------------------ namespaces

    def netns_id(self, netns_fd: int) -> int | None:
        for kind, payload in self._do(c.RTM_GETNSID, 0, c.get_nsid(netns_fd)):
            if kind == c.RTM_NEWNSID:
                return c.decode_nsid(payload)
        return None
