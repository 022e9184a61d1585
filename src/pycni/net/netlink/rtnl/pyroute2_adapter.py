"""Pyroute2Kernel: pycni.net.netlink.kernel.Kernel over a pyroute2 IPRoute.

It is the whole backend under PYCNI_NETLINK=pyroute2 and the native client's fallback for
what it does not encode itself. pyroute2 is imported when one is opened, never by importing
this module. Its messages are read here and only here (into pycni.net.netlink.kernel's records)
and its NetlinkError becomes ours, so no caller sees a pyroute2 type.
"""

from __future__ import annotations

import fcntl
import functools
import ipaddress
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_REQUEST, nla, nlmsg
from pyroute2.netlink.exceptions import NetlinkError as Pyroute2Error
from pyroute2.netlink.rtnl import (
    RTM_DELQDISC,
    RTM_GETNETCONF,
    RTM_NEWLINK,
    RTM_NEWNETCONF,
    RTM_NEWQDISC,
)
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from pycni.net.netlink.kernel import (
    CLASS_1_1,
    ETH_P_ALL,
    INGRESS_HANDLE,
    MAIN_TABLE,
    NUD_PERMANENT,
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
    VxlanInfo,
    broadcast_of,
)
from pycni.net.netlink.rtnl import codec, tc_codec
from pycni.net.netlink.rtnl.native import dump_addresses
from pycni.net.netlink.rtnl.wire import NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, Socket
from pycni.net.ns import entered_fd

if TYPE_CHECKING:
    from typing import Unpack

    from pyroute2 import IPRoute

    from pycni.net.netlink.kernel import LinkChanges

NTF_SELF = 0x02  # an FDB entry of the device itself, not of a bridge above it
MACVLAN_MODE_NAMES = {1: "private", 2: "vepa", 4: "bridge", 8: "passthru", 16: "source"}


class _Msg(Protocol):
    """What pyroute2's messages offer (they are untyped; this is how they are read)."""

    def get_attr(self, name: str) -> object: ...

    def __getitem__(self, key: str) -> object: ...


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _ip(value: object) -> IPAddress | None:
    if not value:
        return None
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        return None


SIOCGSKNS = 0x894C  # ioctl: an fd of the network namespace a socket belongs to


def socket_in_current_netns(fd: int) -> bool:
    """True when socket ``fd`` lives in this thread's network namespace."""
    try:
        ns_fd = fcntl.ioctl(fd, SIOCGSKNS)
    except OSError:
        return False
    try:
        there = os.fstat(ns_fd)
    finally:
        os.close(ns_fd)
    here = os.stat("/proc/thread-self/ns/net")
    return (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino)


@contextmanager
def _translated() -> Iterator[None]:
    """pyroute2's NetlinkError as ours."""
    try:
        yield
    except Pyroute2Error as exc:
        code = _int(exc.code)
        args = exc.args
        text = str(args[1]) if len(args) > 1 else ""
        raise NetlinkError(code, text) from None


# ------------------------------------------------------------------ messages to records


def link_of(msg: _Msg) -> Link:
    kind = ""
    mode: int | None = None
    vxlan: VxlanInfo | None = None
    ipvlan_mode: int | None = None
    ipvlan_flags = 0
    vlan_id: int | None = None
    info = msg.get_attr("IFLA_LINKINFO")
    if info is not None:
        info_msg: _Msg = info  # type: ignore[assignment]
        kind = _text(info_msg.get_attr("IFLA_INFO_KIND"))
        data = info_msg.get_attr("IFLA_INFO_DATA")
        if data is not None and kind in ("macvlan", "vxlan", "ipvlan", "vlan"):
            data_msg: _Msg = data  # type: ignore[assignment]
            if kind == "ipvlan":
                ipvlan_mode = _int(data_msg.get_attr("IFLA_IPVLAN_MODE"))
                ipvlan_flags = _int(data_msg.get_attr("IFLA_IPVLAN_FLAGS"))
            elif kind == "vlan":
                vlan_id = _int(data_msg.get_attr("IFLA_VLAN_ID"))
            elif kind == "macvlan":
                raw = data_msg.get_attr("IFLA_MACVLAN_MODE")
                by_name = {v: k for k, v in MACVLAN_MODE_NAMES.items()}
                mode = by_name[raw] if isinstance(raw, str) and raw in by_name else _int(raw)
            else:
                vni = data_msg.get_attr("IFLA_VXLAN_ID")
                vxlan = VxlanInfo(
                    vni=None if vni is None else _int(vni),
                    local=_ip(data_msg.get_attr("IFLA_VXLAN_LOCAL"))
                    or _ip(data_msg.get_attr("IFLA_VXLAN_LOCAL6")),
                    underlay_index=_int(data_msg.get_attr("IFLA_VXLAN_LINK")),
                    port=_int(data_msg.get_attr("IFLA_VXLAN_PORT")),
                    learning=bool(data_msg.get_attr("IFLA_VXLAN_LEARNING")),
                )
    vrf_table: int | None = None
    if kind == "vrf" and info is not None:
        vrf_data = info_msg.get_attr("IFLA_INFO_DATA")
        if vrf_data is not None:
            table = vrf_data.get_attr("IFLA_VRF_TABLE")  # type: ignore[attr-defined]
            vrf_table = None if table is None else _int(table)
    netnsid = msg.get_attr("IFLA_LINK_NETNSID")
    return Link(
        index=_int(msg["index"]),
        name=_text(msg.get_attr("IFLA_IFNAME")),
        flags=_int(msg["flags"]),
        mac=_text(msg.get_attr("IFLA_ADDRESS")),
        mtu=_int(msg.get_attr("IFLA_MTU")),
        master=_int(msg.get_attr("IFLA_MASTER")),
        peer_index=_int(msg.get_attr("IFLA_LINK")),
        peer_netnsid=None if netnsid is None else _int(netnsid),
        kind=kind,
        oper_state=_text(msg.get_attr("IFLA_OPERSTATE") or "unknown").lower(),
        alias=_text(msg.get_attr("IFLA_IFALIAS")),
        txqlen=_int(msg.get_attr("IFLA_TXQLEN")),
        promiscuity=_int(msg.get_attr("IFLA_PROMISCUITY")),
        macvlan_mode=mode,
        vxlan=vxlan,
        ipvlan_mode=ipvlan_mode,
        ipvlan_flags=ipvlan_flags,
        vlan_id=vlan_id,
        vrf_table=vrf_table,
    )


def address_of(msg: _Msg) -> Address | None:
    ip = _ip(msg.get_attr("IFA_ADDRESS") or msg.get_attr("IFA_LOCAL"))
    if ip is None:
        return None
    interface: IPInterface = ipaddress.ip_interface(f"{ip}/{_int(msg['prefixlen'])}")
    flags = _int(msg.get_attr("IFA_FLAGS")) or _int(msg["flags"])
    return Address(_int(msg["index"]), interface, flags, _int(msg["scope"]))


def route_of(msg: _Msg) -> Route | None:
    family = _int(msg["family"])
    if family not in (2, 10):
        return None
    dst = _text(msg.get_attr("RTA_DST")) or ("::" if family == 10 else "0.0.0.0")
    priority = msg.get_attr("RTA_PRIORITY")
    mtu = 0
    metrics = msg.get_attr("RTA_METRICS")
    if metrics is not None:
        metrics_msg: _Msg = metrics  # type: ignore[assignment]
        mtu = _int(metrics_msg.get_attr("RTAX_MTU"))
    oifs: tuple[int, ...] = ()
    multipath = msg.get_attr("RTA_MULTIPATH")
    if isinstance(multipath, list):
        oifs = tuple(_int(hop["oif"]) for hop in multipath)
    return Route(
        dst=ipaddress.ip_network(f"{dst}/{_int(msg['dst_len'])}", strict=False),
        oif=_int(msg.get_attr("RTA_OIF")),
        gateway=_ip(msg.get_attr("RTA_GATEWAY")),
        table=_int(msg.get_attr("RTA_TABLE")) or _int(msg["table"]),
        proto=_int(msg["proto"]),
        scope=_int(msg["scope"]),
        type=_int(msg["type"]),
        flags=_int(msg["flags"]),
        priority=None if priority is None else _int(priority),
        prefsrc=_ip(msg.get_attr("RTA_PREFSRC")),
        mtu=mtu,
        multipath_oifs=oifs,
    )


def rule_of(msg: _Msg) -> Rule:
    src = msg.get_attr("FRA_SRC")
    priority = msg.get_attr("FRA_PRIORITY")
    table = _int(msg.get_attr("FRA_TABLE")) or _int(msg.get_attr("RTA_TABLE")) or _int(msg["table"])
    return Rule(
        family=_int(msg["family"]),
        table=table,
        src=ipaddress.ip_network(f"{src}/{_int(msg['src_len'])}", strict=False) if src else None,
        priority=None if priority is None else _int(priority),
    )


def route_spec(route: Route) -> dict[str, object]:
    """pyroute2's keywords for a route."""
    spec: dict[str, object] = {"dst": str(route.dst)}
    if route.oif:
        spec["oif"] = route.oif
    if route.gateway is not None:
        spec["gateway"] = str(route.gateway)
    if route.table != MAIN_TABLE:
        spec["table"] = route.table
    for key, value in (("proto", route.proto), ("scope", route.scope), ("type", route.type)):
        if value is not None:
            spec[key] = value
    if route.flags:
        spec["flags"] = route.flags
    if route.priority:
        spec["priority"] = route.priority
    if route.prefsrc is not None:
        spec["prefsrc"] = str(route.prefsrc)
    if route.mtu:
        spec["metrics"] = {"RTAX_MTU": route.mtu}
    return spec


class _Pyroute2Messages:
    """pyroute2 message classes for two requests it has no encoder for; made on first use
    (pyroute2 is imported only then) by :func:`_messages`."""

    def __init__(self) -> None:
        class inet_conf(nlmsg):  # type: ignore[misc]
            """RTM_NEWLINK with IFLA_AF_SPEC > AF_INET > IFLA_INET_CONF > {id: u32}."""

            fields = (
                ("family", "B"),
                ("__align", "x"),
                ("ifi_type", "H"),
                ("index", "i"),
                ("flags", "I"),
                ("change", "I"),
            )
            nla_map = ((26, "IFLA_AF_SPEC", "af_spec"),)

            class af_spec(nla):  # type: ignore[misc]
                nla_map = ((2, "AF_INET", "inet"),)

                class inet(nla):  # type: ignore[misc]
                    nla_map = ((1, "IFLA_INET_CONF", "conf"),)

                    class conf(nla):  # type: ignore[misc]
                        nla_map = tuple((i, f"IPV4_DEVCONF_{i}", "uint32") for i in range(1, 34))

        class netconf(nlmsg):  # type: ignore[misc]
            """struct netconfmsg and the NETCONFA_* attributes pycni reads."""

            fields = (("family", "B"), ("__pad", "3x"))
            nla_map = (
                (0, "NETCONFA_UNSPEC", "none"),
                (1, "NETCONFA_IFINDEX", "int32"),
                (2, "NETCONFA_FORWARDING", "int32"),
            )

        self.inet_conf = inet_conf
        self.netconf = netconf


@functools.cache
def _messages() -> _Pyroute2Messages:
    return _Pyroute2Messages()


class Pyroute2Kernel:
    """The Kernel through one pyroute2 IPRoute (of the namespace it was opened in)."""

    def __init__(self, ipr: IPRoute) -> None:
        self._ipr = ipr

    @classmethod
    def open(cls) -> Pyroute2Kernel:
        """An IPRoute in the calling thread's namespace (its socket made before returning)."""
        ipr = IPRoute()
        ipr.fileno()
        return cls(ipr)

    def fileno(self) -> int:
        return int(self._ipr.fileno())

    def close(self) -> None:
        self._ipr.close()

    # ------------------------------------------------------------ links

    def link(self, index: int) -> Link:
        with _translated():
            return link_of(self._ipr.get_links(index)[0])

    def find_link(self, name: str) -> Link | None:
        try:
            found = list(self._ipr.link("get", ifname=name))
        except Pyroute2Error:
            return None
        return link_of(found[0]) if found else None

    def links(self) -> list[Link]:
        with _translated():
            return [link_of(m) for m in self._ipr.get_links()]

    def _link(self, command: str, **spec: object) -> None:
        with _translated():
            self._ipr.link(command, **spec)

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
        peer: dict[str, object] = {"ifname": peer_name, "net_ns_fd": peer_netns_fd}
        if mtu:
            peer["mtu"] = mtu
        if peer_mac:
            peer["address"] = peer_mac
        spec: dict[str, object] = {"ifname": name, "kind": "veth", "peer": peer}
        if mtu:
            spec["mtu"] = mtu
        if master:
            spec["master"] = master
        if txqlen is not None:
            spec["txqlen"] = txqlen
        self._link("add", **spec)
        return 0  # the caller looks the index up

    def add_bridge(self, name: str, mtu: int = 0, vlan_filtering: bool = False) -> None:
        spec: dict[str, object] = {"ifname": name, "kind": "bridge"}
        if mtu:
            spec["mtu"] = mtu
        if vlan_filtering:
            spec["br_vlan_filtering"] = 1
        self._link("add", **spec)

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
        if bc_queue_len:  # pyroute2 0.9 has no IFLA_MACVLAN_BC_QUEUE_LEN: our codec has
            body = codec.new_macvlan(name, master, mode, netns_fd, mtu, mac, bc_queue_len)
            self._raw_create(codec.RTM_NEWLINK, body)
            return
        spec: dict[str, object] = {
            "ifname": name,
            "kind": "macvlan",
            "link": master,
            "macvlan_mode": MACVLAN_MODE_NAMES.get(mode, mode),
            "net_ns_fd": netns_fd,
        }
        if mtu:
            spec["mtu"] = mtu
        if mac:
            spec["address"] = mac
        self._link("add", **spec)

    def add_ipvlan(
        self, name: str, master: int, mode: int, flags: int, netns_fd: int, mtu: int = 0
    ) -> None:
        if flags:  # pyroute2 0.9 has no IFLA_IPVLAN_FLAGS; the native client has
            raise NetlinkError(95, "pyroute2 cannot set ipvlan flags")
        spec: dict[str, object] = {
            "ifname": name,
            "kind": "ipvlan",
            "link": master,
            "ipvlan_mode": mode,
            "net_ns_fd": netns_fd,
        }
        if mtu:
            spec["mtu"] = mtu
        self._link("add", **spec)

    def add_vlan(self, name: str, master: int, vlan_id: int, netns_fd: int, mtu: int = 0) -> None:
        spec: dict[str, object] = {
            "ifname": name,
            "kind": "vlan",
            "link": master,
            "vlan_id": vlan_id,
            "net_ns_fd": netns_fd,
        }
        if mtu:
            spec["mtu"] = mtu
        self._link("add", **spec)

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
        self._link(
            "add",
            ifname=name,
            kind="vxlan",
            vxlan_id=vni,
            **{"vxlan_local6" if local.version == 6 else "vxlan_local": str(local)},
            vxlan_link=underlay_index,
            vxlan_port=port,
            vxlan_learning=int(learning),
            mtu=mtu,
        )

    def add_ifb(self, name: str, mtu: int, txqlen: int) -> None:
        self._link("add", ifname=name, kind="ifb", mtu=mtu, txqlen=txqlen)

    def add_dummy(self, name: str, mtu: int = 0) -> None:
        spec: dict[str, object] = {"ifname": name, "kind": "dummy"}
        if mtu:
            spec["mtu"] = mtu
        self._link("add", **spec)

    def add_vrf(self, name: str, table: int) -> None:
        self._link("add", ifname=name, kind="vrf", vrf_table=table)

    def set_link(self, index: int, **changes: Unpack[LinkChanges]) -> None:
        spec: dict[str, object] = {"index": index}
        up = changes.get("up")
        if up is not None:
            spec["state"] = "up" if up else "down"
        given = {
            "master": changes.get("master"),
            "mtu": changes.get("mtu"),
            "address": changes.get("mac"),
            "net_ns_fd": changes.get("netns_fd"),
            "ifname": changes.get("name"),
            "ifalias": changes.get("alias"),
            "txqlen": changes.get("txqlen"),
        }
        spec.update({k: v for k, v in given.items() if v is not None})
        flag_mask = changes.get("flag_mask", 0)
        if flag_mask:
            spec["flags"] = changes.get("flags", 0) & flag_mask
            spec["change"] = flag_mask
        self._link("set", **spec)

    def delete_link(self, index: int) -> None:
        self._link("del", index=index)

    def set_ipv4_conf(self, index: int, values: dict[int, int]) -> None:
        # here: the module's own NLM_F_* flags (the native wire's) have the same names
        from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST

        conf = [[f"IPV4_DEVCONF_{key}", value] for key, value in values.items()]
        msg = _messages().inet_conf()
        msg["index"] = index
        msg["attrs"] = [
            [
                "IFLA_AF_SPEC",
                {"attrs": [["AF_INET", {"attrs": [["IFLA_INET_CONF", {"attrs": conf}]]}]]},
            ]
        ]
        self._ipr.status["nlm_generator"] = False  # see _qdisc_request
        with _translated():
            self._ipr.nlm_request(msg, msg_type=RTM_NEWLINK, msg_flags=NLM_F_REQUEST | NLM_F_ACK)

    def forwarding(self, family: int) -> int:
        netconf = _messages().netconf
        self._ipr.marshal.msg_map[RTM_NEWNETCONF] = netconf  # pyroute2 has no reader of its own
        msg = netconf()
        msg["family"] = family
        msg["attrs"] = [["NETCONFA_IFINDEX", -1]]  # NETCONFA_IFINDEX_ALL
        self._ipr.status["nlm_generator"] = False
        with _translated():
            for reply in self._ipr.nlm_request(
                msg, msg_type=RTM_GETNETCONF, msg_flags=NLM_F_REQUEST
            ):
                value = reply.get_attr("NETCONFA_FORWARDING")
                if isinstance(value, int):
                    return value
        raise NetlinkError(95)  # EOPNOTSUPP: the kernel sent no forwarding setting

    def set_bridge_port(self, index: int, hairpin: bool, isolated: bool) -> None:
        with _translated():
            self._ipr.brport("set", index=index, mode=int(hairpin), isolated=int(isolated))

    def port_vlans(self, index: int) -> list[int]:
        out: list[int] = []
        with _translated():
            for msg in self._ipr.get_vlans(index=index) or []:
                spec = msg.get_attr("IFLA_AF_SPEC")
                if spec is None:
                    continue
                for name, info in spec["attrs"]:
                    if name == "IFLA_BRIDGE_VLAN_INFO":
                        out.append(_int(info["vid"]))
        return out

    def add_port_vlan(self, index: int, vid: int, flags: int = 0) -> None:
        info: dict[str, int] = {"vid": vid, "flags": flags} if flags else {"vid": vid}
        with _translated():
            self._ipr.vlan_filter("add", index=index, vlan_info=info)

    def delete_port_vlan(self, index: int, vid: int) -> None:
        with _translated():
            self._ipr.vlan_filter("del", index=index, vlan_info={"vid": vid})

    # ------------------------------------------------------------ addresses

    def addresses(self, index: int = 0, family: int = 0) -> list[Address]:
        """pyroute2 dumps every address of the namespace and filters in Python, which grows
        with the pods; when this thread is in the client's namespace the kernel-filtered dump
        of the native client is used instead (as before the kernel boundary existed)."""
        if index and socket_in_current_netns(self.fileno()):
            sock = Socket()
            try:
                return dump_addresses(sock, index, family)
            finally:
                sock.close()
        spec: dict[str, int] = {}
        if index:
            spec["index"] = index
        if family:
            spec["family"] = family
        with _translated():
            found = [address_of(m) for m in self._ipr.get_addr(**spec)]
        return [
            a
            for a in found
            if a is not None
            and (not index or a.index == index)
            and (not family or a.family == family)
        ]

    def _addr(self, command: str, index: int, interface: IPInterface, flags: int = 0) -> None:
        spec: dict[str, object] = {
            "index": index,
            "address": str(interface.ip),
            "prefixlen": interface.network.prefixlen,
        }
        if flags:
            spec["flags"] = flags
        broadcast = broadcast_of(interface) if command == "add" else None
        if broadcast is not None:
            spec["broadcast"] = str(broadcast)
        with _translated():
            self._ipr.addr(command, **spec)

    def add_address(self, index: int, interface: IPInterface, flags: int = 0) -> None:
        self._addr("add", index, interface, flags)

    def delete_address(self, index: int, interface: IPInterface) -> None:
        self._addr("del", index, interface)

    # ------------------------------------------------------------ routes

    def routes(self, family: int, table: int = 0, oif: int = 0) -> list[Route]:
        """pyroute2 dumps every route of the family; the filter is applied here."""
        with _translated():
            found = [route_of(m) for m in self._ipr.get_routes(family=family)]
        return [
            r
            for r in found
            if r is not None and (not table or r.table == table) and (not oif or r.oif == oif)
        ]

    def route_to(self, dst: IPAddress) -> list[Route]:
        with _translated():
            found = [route_of(m) for m in self._ipr.route("get", dst=str(dst))]
        return [r for r in found if r is not None]

    def _route(self, command: str, route: Route) -> None:
        with _translated():
            self._ipr.route(command, **route_spec(route))

    def add_route(self, route: Route) -> None:
        self._route("add", route)

    def replace_route(self, route: Route) -> None:
        self._route("replace", route)

    def delete_route(self, route: Route) -> None:
        self._route("del", route)

    # ------------------------------------------------------------ neighbours, FDB

    def neighbours(self, index: int, family: int) -> list[Neighbour]:
        out = []
        with _translated():
            for msg in self._ipr.get_neighbours(family=family, ifindex=index):
                if _int(msg["ifindex"]) != index:
                    continue
                dst, mac = _ip(msg.get_attr("NDA_DST")), _text(msg.get_attr("NDA_LLADDR"))
                if dst is not None and mac:
                    out.append(Neighbour(index, dst, mac, _int(msg["state"])))
        return out

    def set_neighbour(self, index: int, address: IPAddress, mac: str) -> None:
        with _translated():
            self._ipr.neigh(
                "replace", dst=str(address), lladdr=mac, ifindex=index, state=NUD_PERMANENT
            )

    def delete_neighbour(self, index: int, address: IPAddress) -> None:
        with _translated():
            self._ipr.neigh("del", dst=str(address), ifindex=index)

    def fdb_entries(self, index: int) -> list[FdbEntry]:
        out = []
        with _translated():
            for msg in self._ipr.fdb("dump", ifindex=index):
                if _int(msg["ifindex"]) != index:
                    continue
                mac = _text(msg.get_attr("NDA_LLADDR"))
                if mac:
                    out.append(FdbEntry(index, mac, _ip(msg.get_attr("NDA_DST"))))
        return out

    def set_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        with _translated():
            self._ipr.fdb(
                "replace",
                ifindex=index,
                lladdr=mac,
                dst=str(remote),
                state=NUD_PERMANENT,
                flags=NTF_SELF,
            )

    def delete_fdb(self, index: int, mac: str, remote: IPAddress) -> None:
        with _translated():
            self._ipr.fdb("del", ifindex=index, lladdr=mac, dst=str(remote), flags=NTF_SELF)

    # ------------------------------------------------------------ rules

    def rules(self, family: int) -> list[Rule]:
        with _translated():
            return [rule_of(m) for m in self._ipr.get_rules(family=family)]

    def _rule(self, command: str, rule: Rule) -> None:
        spec: dict[str, object] = {"family": rule.family, "table": rule.table}
        if rule.src is not None:
            spec["src"] = str(rule.src.network_address)
            spec["src_len"] = rule.src.prefixlen
        if rule.priority is not None:
            spec["priority"] = rule.priority
        with _translated():
            self._ipr.rule(command, **spec)

    def add_rule(self, rule: Rule) -> None:
        self._rule("add", rule)

    def delete_rule(self, rule: Rule) -> None:
        self._rule("del", rule)

    # ------------------------------------------------------------ traffic control

    def qdiscs(self, index: int) -> list[Qdisc]:
        out = []
        with _translated():
            for msg in self._ipr.get_qdiscs(index=index):
                kind = _text(msg.get_attr("TCA_KIND"))
                tbf = None
                if kind == "tbf":
                    parms = msg.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")
                    tbf = Tbf(_int(parms["rate"]), _int(parms["buffer"]), _int(parms["limit"]))
                out.append(
                    Qdisc(_int(msg["index"]), kind, _int(msg["handle"]), _int(msg["parent"]), tbf)
                )
        if any(q.tbf is not None and q.tbf.rate == 0xFFFFFFFF for q in out):
            # ~0 is how the kernel says "see TCA_TBF_RATE64", which pyroute2 0.9 cannot read
            from pycni.net.netlink.rtnl import tc_codec

            replies = self._raw(tc_codec.RTM_GETQDISC, NLM_F_DUMP, tc_codec.tcmsg(index))
            found = [tc_codec.decode_qdisc(p) for t, p in replies if t == tc_codec.RTM_NEWQDISC]
            out = [q for q in found if q.index == index]
        return out

    def _qdisc_request(self, msg_type: int, flags: int, attrs: list[object], **fields: int) -> None:
        msg = tcmsg()
        for key, value in fields.items():
            msg[key] = value
        if attrs:
            msg["attrs"] = attrs
        # pyroute2 0.9's synchronous nlm_request reads this key without setting it.
        self._ipr.status["nlm_generator"] = False
        with _translated():
            self._ipr.nlm_request(msg, msg_type=msg_type, msg_flags=flags)

    def add_tbf(self, index: int, handle: int, tbf: Tbf) -> None:
        # here: the module's own NLM_F_* flags (the native wire's) have the same names
        from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST

        if tbf.rate > 0xFFFFFFFF:  # pyroute2 0.9 has no TCA_TBF_RATE64: our codec has
            self._raw_create(tc_codec.RTM_NEWQDISC, tc_codec.tbf(index, handle, TC_H_ROOT, tbf))
            return
        parms = {"rate": tbf.rate, "limit": tbf.limit, "buffer": tbf.buffer, "mtu": 0}
        attrs: list[object] = [
            ["TCA_KIND", "tbf"],
            ["TCA_OPTIONS", {"attrs": [["TCA_TBF_PARMS", parms]]}],
        ]
        flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        self._qdisc_request(
            RTM_NEWQDISC, flags, attrs, index=index, handle=handle, parent=TC_H_ROOT
        )

    def add_ingress(self, index: int) -> None:
        with _translated():
            self._ipr.tc("add", "ingress", index, INGRESS_HANDLE)

    def redirect_ingress(self, index: int, target_index: int) -> None:
        """The reference's filter has two mirred actions (see tc_codec.redirect_filter) and
        pyroute2's mirred always steals, so the filter is encoded by tc_codec and sent on a
        raw socket of this client's namespace."""
        body = tc_codec.redirect_filter(
            index, INGRESS_HANDLE, 1, ETH_P_ALL, CLASS_1_1, target_index
        )
        self._raw_create(tc_codec.RTM_NEWTFILTER, body)

    def _raw_create(self, msg_type: int, body: bytes) -> None:
        """One create request our codecs encoded, for what pyroute2 cannot say."""
        self._raw(msg_type, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, body)

    def _raw(self, msg_type: int, flags: int, body: bytes) -> list[tuple[int, bytes]]:
        """One request on a raw socket of this client's namespace; its replies."""
        ns_fd = fcntl.ioctl(self.fileno(), SIOCGSKNS)
        try:
            with entered_fd(ns_fd):
                sock = Socket()
        finally:
            os.close(ns_fd)
        try:
            return sock.request(msg_type, flags, body)
        finally:
            sock.close()

    def delete_qdisc(self, index: int, parent: int) -> None:
        # here: the module's own NLM_F_* flags (the native wire's) have the same names
        from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST

        self._qdisc_request(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, [], index=index, parent=parent)

    # ------------------------------------------------------------ namespaces

    def netns_id(self, netns_fd: int) -> int | None:
        with _translated():
            answer = self._ipr.get_netnsid(fd=netns_fd)
        value = answer.get("nsid") if isinstance(answer, dict) else None
        return value if isinstance(value, int) and value >= 0 else None
