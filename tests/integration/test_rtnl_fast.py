"""The native client (net/netlink/rtnl/native.py) against the real kernel, in private netns.

Each call is checked against what iproute2 reports of the same objects, errors are one
NetlinkError with the errno by name, every request acts on the client's own namespace
whichever namespace the thread is in, and neither the client nor a plugin imports pyroute2.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pycni.net import sysctl
from pycni.net.netlink.kernel import (
    AF_INET,
    AF_INET6,
    IPV4_DEVCONF_ARP_NOTIFY,
    IPV4_DEVCONF_ROUTE_LOCALNET,
    Kernel,
    NetlinkError,
    Route,
)
from pycni.net.netlink.rtnl.native import NativeKernel
from tests import harness

IP = ipaddress.ip_address
NET = ipaddress.ip_network
IFACE = ipaddress.ip_interface


def ip_json(ns: harness.Namespace, *argv: str) -> Any:
    return json.loads(ns.run("ip", "-j", "-d", *argv).stdout)


@pytest.fixture
def kernel(node: harness.Namespace) -> Iterator[Kernel]:
    """The native client, opened in the node namespace (the test's thread stays outside)."""
    with node.entered():
        client = NativeKernel()
    try:
        yield client
    finally:
        client.close()


@pytest.mark.kernel
def test_links_decode_as_iproute2_shows_them(node: harness.Namespace, kernel: Kernel) -> None:
    fast = kernel
    node.run("ip", "link", "add", "br7", "mtu", "1400", "type", "bridge")
    node.run("ip", "link", "add", "va", "type", "veth", "peer", "name", "vb")
    node.run("ip", "link", "set", "va", "master", "br7", "up")
    node.run("ip", "link", "set", "br7", "alias", "hello", "up")
    node.run("ip", "link", "add", "mvl", "link", "vb", "type", "macvlan", "mode", "bridge")
    node.run("ip", "addr", "add", "10.70.0.1/24", "dev", "vb")
    node.run(
        "ip", "link", "add", "vx7", "type", "vxlan", "id", "42", "local", "10.70.0.1",
        "dev", "vb", "dstport", "4789", "nolearning",
    )  # fmt: skip
    shown = {d["ifname"]: d for d in ip_json(node, "link", "show")}
    assert {x.name for x in fast.links()} == set(shown)
    for name, info in shown.items():
        got = fast.find_link(name)
        assert got is not None and got in fast.links()
        assert got.index == info["ifindex"] and got.mtu == info["mtu"]
        assert got.mac == info.get("address", "") and fast.link(got.index) == got
        assert got.kind == info.get("linkinfo", {}).get("info_kind", "")
        assert got.txqlen == info.get("txqlen", 0)  # not the operstate: linkwatch sets it later
    br, va = fast.find_link("br7"), fast.find_link("va")
    assert br is not None and va is not None
    assert br.kind == "bridge" and br.alias == "hello" and br.up
    assert va.master == br.index and va.kind == "veth"
    mvl, vx = fast.find_link("mvl"), fast.find_link("vx7")
    assert mvl is not None and mvl.macvlan_mode == 4
    assert vx is not None and vx.vxlan is not None
    assert (vx.vxlan.vni, vx.vxlan.port, vx.vxlan.learning) == (42, 4789, False)
    assert vx.vxlan.local == IP("10.70.0.1") and vx.vxlan.underlay_index == shown["vb"]["ifindex"]


@pytest.mark.kernel
def test_link_errors_are_named(kernel: Kernel) -> None:
    assert kernel.find_link("nosuch0") is None
    with pytest.raises(NetlinkError) as exc:
        kernel.link(99999)
    assert exc.value.errno == errno.ENODEV and exc.value.no_such_link
    assert isinstance(exc.value, OSError)
    assert str(exc.value) == str((errno.ENODEV, os.strerror(errno.ENODEV)))


@pytest.mark.kernel
def test_bridge_and_veth_add_with_peer_in_pod(
    node: harness.Namespace, pod_factory: Any, kernel: Kernel
) -> None:
    pod = pod_factory()
    kernel.add_bridge("br8", mtu=1450)
    with pytest.raises(NetlinkError) as exc:
        kernel.add_bridge("br8")
    assert exc.value.exists
    (br,) = ip_json(node, "link", "show", "br8")
    assert br["mtu"] == 1450 and br["linkinfo"]["info_kind"] == "bridge"
    with open(pod.path) as pod_ns:
        kernel.add_veth("vethab12cd34", "eth0", pod_ns.fileno(), 1450, "02:11:22:33:44:55")
    (host,) = ip_json(node, "link", "show", "vethab12cd34")
    assert host["mtu"] == 1450 and host["linkinfo"]["info_kind"] == "veth"
    (peer,) = ip_json(pod, "link", "show", "eth0")
    assert peer["address"] == "02:11:22:33:44:55" and peer["mtu"] == 1450
    assert peer["linkinfo"]["info_kind"] == "veth"
    host_index = host["ifindex"]
    assert kernel.link(host_index).peer_index == peer["ifindex"]
    kernel.delete_link(host_index)
    assert kernel.find_link("vethab12cd34") is None
    with pytest.raises(NetlinkError) as exc:
        kernel.delete_link(host_index)
    assert exc.value.errno == errno.ENODEV


@pytest.mark.kernel
def test_other_link_kinds(node: harness.Namespace, pod_factory: Any, kernel: Kernel) -> None:
    node.run("ip", "link", "add", "ok0", "type", "veth", "peer", "name", "ok1")
    node.run("ip", "addr", "add", "10.71.0.1/24", "dev", "ok0")
    master = ip_json(node, "link", "show", "ok0")[0]["ifindex"]
    kernel.add_ifb("ifb7", 1400, 0)
    (ifb,) = ip_json(node, "link", "show", "ifb7")
    assert (
        ifb["mtu"] == 1400 and ifb.get("txqlen", 0) == 0 and ifb["linkinfo"]["info_kind"] == "ifb"
    )
    kernel.add_vxlan("vx8", 8, IP("10.71.0.1"), master, 8472, 1350)
    (vx,) = ip_json(node, "link", "show", "vx8")
    data = vx["linkinfo"]["info_data"]
    assert (data["id"], data["local"], data["port"], data["learning"]) == (
        8,
        "10.71.0.1",
        8472,
        False,
    )
    pod = pod_factory()
    with open(pod.path) as pod_ns:
        kernel.add_macvlan("mvtmp0", master, 4, pod_ns.fileno(), 1300, "02:aa:00:00:00:01")
    (mv,) = ip_json(pod, "link", "show", "mvtmp0")
    assert mv["linkinfo"]["info_kind"] == "macvlan" and mv["mtu"] == 1300
    assert mv["linkinfo"]["info_data"]["mode"] == "bridge"
    assert mv["address"] == "02:aa:00:00:00:01"


@pytest.mark.kernel
def test_link_set(node: harness.Namespace, pod_factory: Any, kernel: Kernel) -> None:
    node.run("ip", "link", "add", "br9", "type", "bridge")
    node.run("ip", "link", "add", "sa", "type", "veth", "peer", "name", "sb")
    br, sa = kernel.find_link("br9"), kernel.find_link("sa")
    assert br is not None and sa is not None
    kernel.set_link(br.index, up=True)
    kernel.set_link(sa.index, master=br.index)
    kernel.set_link(sa.index, mtu=1300)
    kernel.set_link(sa.index, mac="02:aa:bb:cc:dd:ee")
    kernel.set_link(sa.index, flags=0x100, flag_mask=0x100)  # promisc
    kernel.set_link(sa.index, txqlen=77)
    kernel.set_link(sa.index, alias="port")
    kernel.set_link(sa.index, up=True)
    (shown,) = ip_json(node, "link", "show", "sa")
    assert "UP" in shown["flags"] and "PROMISC" in shown["flags"]
    assert shown["master"] == "br9" and shown["mtu"] == 1300 and shown["txqlen"] == 77
    assert shown["address"] == "02:aa:bb:cc:dd:ee" and shown["ifalias"] == "port"
    now = kernel.link(sa.index)
    assert (now.mtu, now.txqlen, now.alias, now.mac) == (1300, 77, "port", "02:aa:bb:cc:dd:ee")
    assert now.promiscuity > 0 and now.master == br.index
    assert "UP" in ip_json(node, "link", "show", "br9")[0]["flags"]
    kernel.set_link(sa.index, up=False)
    kernel.set_link(sa.index, flags=0, flag_mask=0x100)
    kernel.set_link(sa.index, alias="")
    kernel.set_link(sa.index, name="renamed")
    (shown,) = ip_json(node, "link", "show", "renamed")
    assert "UP" not in shown["flags"] and "PROMISC" not in shown["flags"]
    assert "ifalias" not in shown
    pod = pod_factory()
    with open(pod.path) as pod_ns:
        kernel.set_link(sa.index, netns_fd=pod_ns.fileno(), name="moved")
    assert kernel.find_link("renamed") is None
    assert ip_json(pod, "link", "show", "moved")[0]["link_type"] == "ether"
    with pytest.raises(NetlinkError) as exc:
        kernel.set_link(99999, up=True)
    assert exc.value.errno == errno.ENODEV


def _sysctl(ns: harness.Namespace, name: str) -> str:
    return str(ns.run("cat", f"/proc/sys/{name}").stdout).strip()


@pytest.mark.kernel
def test_ipv4_conf_over_netlink_is_the_sysctl(node: harness.Namespace, kernel: Kernel) -> None:
    """set_ipv4_conf lands in the same place as a /proc/sys/net/ipv4/conf/<dev> write."""
    node.run("ip", "link", "add", "ca", "type", "veth", "peer", "name", "cb")
    index = ip_json(node, "link", "show", "ca")[0]["ifindex"]
    assert _sysctl(node, "net/ipv4/conf/ca/arp_notify") == "0"
    kernel.set_ipv4_conf(index, {IPV4_DEVCONF_ARP_NOTIFY: 1})
    assert _sysctl(node, "net/ipv4/conf/ca/arp_notify") == "1"
    assert _sysctl(node, "net/ipv4/conf/cb/arp_notify") == "0"  # only that link
    kernel.set_ipv4_conf(index, {IPV4_DEVCONF_ARP_NOTIFY: 0, IPV4_DEVCONF_ROUTE_LOCALNET: 1})
    assert _sysctl(node, "net/ipv4/conf/ca/arp_notify") == "0"
    assert _sysctl(node, "net/ipv4/conf/ca/route_localnet") == "1"
    with pytest.raises(NetlinkError) as exc:
        kernel.set_ipv4_conf(99999, {IPV4_DEVCONF_ARP_NOTIFY: 1})
    assert exc.value.no_such_link


@pytest.mark.kernel
def test_forwarding_read_over_netlink(node: harness.Namespace, kernel: Kernel) -> None:
    """forwarding() reads what /proc/sys shows, per family, and follows a change."""
    for family, name in (
        (AF_INET, "net/ipv4/ip_forward"),
        (AF_INET6, "net/ipv6/conf/all/forwarding"),
    ):
        for value in ("1", "0"):
            node.run("sh", "-c", f"echo {value} > /proc/sys/{name}")
            assert kernel.forwarding(family) == int(value) == int(_sysctl(node, name))
        with node.entered():
            sysctl.enable_forwarding(kernel, sysctl.THREAD, 4 if family == AF_INET else 6)
        assert _sysctl(node, name) == "1" and kernel.forwarding(family) == 1


@pytest.mark.kernel
def test_bridge_port_flags_and_vlans(node: harness.Namespace, kernel: Kernel) -> None:
    try:
        kernel.add_bridge("brv", vlan_filtering=True)
        filtering = True
    except NetlinkError as exc:  # a kernel without CONFIG_BRIDGE_VLAN_FILTERING (this VM's)
        assert exc.not_supported
        kernel.add_bridge("brv")
        filtering = False
    node.run("ip", "link", "add", "pv0", "type", "veth", "peer", "name", "pv1")
    node.run("ip", "link", "set", "pv0", "master", "brv")
    port = ip_json(node, "link", "show", "pv0")[0]["ifindex"]
    kernel.set_bridge_port(port, hairpin=True, isolated=True)
    (info,) = ip_json(node, "link", "show", "pv0")
    assert info["linkinfo"]["info_slave_data"]["hairpin"] is True
    assert info["linkinfo"]["info_slave_data"]["isolated"] is True
    if not filtering:
        with pytest.raises(NetlinkError) as refused:
            kernel.add_port_vlan(port, 10, 0x2 | 0x4)
        assert refused.value.not_supported
        return
    assert kernel.port_vlans(port) == [1]
    kernel.add_port_vlan(port, 10, 0x2 | 0x4)
    kernel.add_port_vlan(port, 20)
    kernel.delete_port_vlan(port, 1)
    assert sorted(kernel.port_vlans(port)) == [10, 20]


@pytest.mark.kernel
def test_addresses(node: harness.Namespace, kernel: Kernel) -> None:
    node.run("ip", "link", "add", "ad0", "type", "veth", "peer", "name", "ad1")
    node.run("ip", "addr", "add", "10.40.0.9/16", "dev", "ad1")  # another link: filtered out
    idx = ip_json(node, "link", "show", "ad0")[0]["ifindex"]
    for v4, v6 in (("10.44.0.1/24", "fd44::1/64"), ("10.45.0.1/24", "")):
        kernel.add_address(idx, IFACE(v4))
        if v6:
            kernel.add_address(idx, IFACE(v6))
        with pytest.raises(NetlinkError) as exc:
            kernel.add_address(idx, IFACE(v4))
        assert exc.value.exists
    kernel_flags = 0x02  # IFA_F_NODAD
    kernel.add_address(idx, IFACE("fd45::1/64"), kernel_flags)
    (shown,) = ip_json(node, "addr", "show", "dev", "ad0")
    got = {(a["local"], a["prefixlen"]) for a in shown["addr_info"]}
    assert {("10.44.0.1", 24), ("fd44::1", 64), ("10.45.0.1", 24), ("fd45::1", 64)} <= got
    # IPv4 addresses come with the subnet's broadcast, as Go's netlink library adds them
    brd = {a["local"]: a.get("broadcast") for a in shown["addr_info"] if a["family"] == "inet"}
    assert brd == {"10.44.0.1": "10.44.0.255", "10.45.0.1": "10.45.0.255"}
    kernel.add_address(idx, IFACE("10.46.0.1/31"))
    kernel.add_address(idx, IFACE("10.46.0.3/32"))
    (now,) = ip_json(node, "addr", "show", "dev", "ad0")
    point = {a["local"]: a.get("broadcast") for a in now["addr_info"] if a["family"] == "inet"}
    assert point["10.46.0.1"] is None and point["10.46.0.3"] is None  # RFC 3021: none for /31
    kernel.delete_address(idx, IFACE("10.46.0.1/31"))
    kernel.delete_address(idx, IFACE("10.46.0.3/32"))
    assert len(kernel.addresses(index=idx)) == len(shown["addr_info"])
    assert {a.interface.ip for a in kernel.addresses(index=idx, family=AF_INET6)} >= {
        IP("fd44::1"),
        IP("fd45::1"),
    }
    assert all(a.family == AF_INET6 for a in kernel.addresses(index=idx, family=AF_INET6))
    nodad = next(a for a in kernel.addresses(index=idx) if a.interface == IFACE("fd45::1/64"))
    assert nodad.flags & 0x02
    kernel.delete_address(idx, IFACE("10.44.0.1/24"))
    kernel.delete_address(idx, IFACE("10.45.0.1/24"))
    assert not [a for a in kernel.addresses(index=idx, family=AF_INET)]
    with pytest.raises(NetlinkError) as exc:
        kernel.delete_address(idx, IFACE("10.44.0.1/24"))
    assert exc.value.errno == errno.EADDRNOTAVAIL


@pytest.mark.kernel
def test_routes(node: harness.Namespace, kernel: Kernel) -> None:
    node.run("ip", "link", "add", "rt0", "type", "veth", "peer", "name", "rt1")
    node.run("ip", "link", "set", "rt0", "up")
    node.run("ip", "link", "set", "rt1", "up")
    node.run("ip", "addr", "add", "10.50.0.1/24", "dev", "rt0")
    node.run("ip", "addr", "add", "fd50::1/64", "dev", "rt0", "nodad")
    idx = ip_json(node, "link", "show", "rt0")[0]["ifindex"]
    gw = IP("10.50.0.2")
    kernel.add_route(Route(NET("10.60.0.0/16"), oif=idx, gateway=gw, proto=3))
    kernel.add_route(Route(NET("10.61.0.0/16"), oif=idx, scope=253, priority=7, proto=3))
    kernel.add_route(Route(NET("0.0.0.0/0"), oif=idx, gateway=gw, proto=3, table=100))
    kernel.add_route(Route(NET("fd60::/48"), oif=idx, gateway=IP("fd50::2"), proto=3))
    kernel.add_route(Route(NET("10.62.0.0/16"), oif=idx, mtu=1200))
    kernel.add_route(
        Route(NET("10.63.0.0/16"), oif=idx, gateway=gw, prefsrc=IP("10.50.0.1"), proto=3)
    )
    kernel.add_route(Route(NET("10.64.0.0/16"), oif=idx, gateway=IP("10.99.0.1"), flags=4))
    with pytest.raises(NetlinkError) as exc:
        kernel.add_route(Route(NET("10.60.0.0/16"), oif=idx, gateway=gw, proto=3))
    assert exc.value.exists
    main = {r["dst"]: r for r in ip_json(node, "route", "show")}
    assert main["10.60.0.0/16"]["gateway"] == "10.50.0.2"
    assert main["10.60.0.0/16"]["protocol"] == "boot"
    assert main["10.61.0.0/16"]["scope"] == "link" and main["10.61.0.0/16"]["metric"] == 7
    metrics = {k: v for d in main["10.62.0.0/16"]["metrics"] for k, v in d.items()}
    assert metrics == {"mtu": 1200}
    assert main["10.62.0.0/16"]["protocol"] == "static"  # pyroute2's default
    assert main["10.63.0.0/16"]["prefsrc"] == "10.50.0.1"
    assert "onlink" in main["10.64.0.0/16"]["flags"]
    (default,) = ip_json(node, "route", "show", "table", "100")
    assert default["dst"] == "default" and default["gateway"] == "10.50.0.2"
    v6 = {r["dst"]: r for r in ip_json(node, "-6", "route", "show")}
    assert v6["fd60::/48"]["gateway"] == "fd50::2"
    listed = {r.dst: r for r in kernel.routes(AF_INET, table=254)}
    assert listed[NET("10.61.0.0/16")].priority == 7 and listed[NET("10.61.0.0/16")].scope == 253
    assert listed[NET("10.62.0.0/16")].mtu == 1200 and listed[NET("10.63.0.0/16")].prefsrc
    assert listed[NET("10.64.0.0/16")].flags & 4
    assert [r.dst for r in kernel.routes(AF_INET, table=100)] == [NET("0.0.0.0/0")]
    assert all(r.oif == idx for r in kernel.routes(AF_INET, oif=idx))
    kernel.replace_route(Route(NET("10.60.0.0/16"), oif=idx, gateway=IP("10.50.0.3"), proto=3))
    main = {r["dst"]: r for r in ip_json(node, "route", "show")}
    assert main["10.60.0.0/16"]["gateway"] == "10.50.0.3"
    (got,) = kernel.route_to(IP("10.60.1.1"))
    assert got.oif == idx and got.gateway == IP("10.50.0.3") and got.dst == NET("10.60.1.1/32")
    kernel.delete_route(Route(NET("10.60.0.0/16"), oif=idx, gateway=IP("10.50.0.3"), proto=3))
    assert "10.60.0.0/16" not in {r["dst"] for r in ip_json(node, "route", "show")}
    with pytest.raises(NetlinkError) as exc:
        kernel.delete_route(Route(NET("10.60.0.0/16"), oif=idx))
    assert exc.value.errno == errno.ESRCH and exc.value.no_such_entry
    # as pyroute2: a delete without proto matches the kernel's own subnet route (ptp does this)
    kernel.delete_route(Route(NET("10.50.0.0/24"), oif=idx, scope=253))
    assert "10.50.0.0/24" not in {r["dst"] for r in ip_json(node, "route", "show")}


@pytest.mark.kernel
def test_routes_decode_as_iproute2_shows_them(node: harness.Namespace, kernel: Kernel) -> None:
    node.run("ip", "link", "add", "rd0", "type", "veth", "peer", "name", "rd1")
    node.run("ip", "link", "set", "rd0", "up")
    node.run("ip", "addr", "add", "10.51.0.1/24", "dev", "rd0")
    node.run("ip", "route", "add", "10.52.0.0/16", "via", "10.51.0.2", "metric", "5")
    node.run("ip", "route", "add", "10.53.0.0/16", "dev", "rd0", "src", "10.51.0.1", "mtu", "1300")
    rd0 = ip_json(node, "link", "show", "rd0")[0]["ifindex"]
    for family, flag in ((AF_INET, "-4"), (AF_INET6, "-6")):
        shown = ip_json(node, flag, "route", "show", "table", "all")
        listed = kernel.routes(family)
        assert len(listed) == len(shown)
        assert {(r.table, str(r.dst)) for r in listed} == {
            (_TABLES.get(d.get("table", "main"), 254), _dst(d["dst"], family)) for d in shown
        }
        assert kernel.routes(family, table=254) == [r for r in listed if r.table == 254]
    main = {r.dst: r for r in kernel.routes(AF_INET, table=254)}
    via = main[NET("10.52.0.0/16")]
    assert (via.gateway, via.priority, via.oif) == (IP("10.51.0.2"), 5, rd0)
    src = main[NET("10.53.0.0/16")]
    assert (src.prefsrc, src.mtu, src.gateway) == (IP("10.51.0.1"), 1300, None)


_TABLES = {"main": 254, "local": 255, "default": 253}


def _dst(shown: str, family: int) -> str:
    """iproute2's name of a route's destination as an ip_network's text."""
    if shown == "default":
        return "0.0.0.0/0" if family == AF_INET else "::/0"
    if "/" in shown:
        return shown
    return f"{shown}/32" if family == AF_INET else f"{shown}/128"


@pytest.mark.kernel
def test_neighbours_fdb_and_rules(node: harness.Namespace, kernel: Kernel) -> None:
    node.run("ip", "link", "add", "nb0", "type", "veth", "peer", "name", "nb1")
    node.run("ip", "link", "set", "nb0", "up")
    node.run("ip", "addr", "add", "10.72.0.1/24", "dev", "nb0")
    node.run(
        "ip", "link", "add", "vx9", "type", "vxlan", "id", "9", "local", "10.72.0.1",
        "dev", "nb0", "dstport", "8472", "nolearning",
    )  # fmt: skip
    nb0 = ip_json(node, "link", "show", "nb0")[0]["ifindex"]
    vx9 = ip_json(node, "link", "show", "vx9")[0]["ifindex"]
    kernel.set_neighbour(nb0, IP("10.72.0.9"), "02:00:00:00:00:09")
    (entry,) = [n for n in kernel.neighbours(nb0, AF_INET) if n.address == IP("10.72.0.9")]
    assert entry.mac == "02:00:00:00:00:09" and entry.state & 0x80
    kernel.delete_neighbour(nb0, IP("10.72.0.9"))
    with pytest.raises(NetlinkError) as exc:
        kernel.delete_neighbour(nb0, IP("10.72.0.9"))
    assert exc.value.no_such_entry
    kernel.set_fdb(vx9, "02:00:00:00:00:0a", IP("10.72.0.10"))
    assert ("02:00:00:00:00:0a", IP("10.72.0.10")) in {
        (e.mac, e.remote) for e in kernel.fdb_entries(vx9)
    }
    kernel.delete_fdb(vx9, "02:00:00:00:00:0a", IP("10.72.0.10"))
    assert "02:00:00:00:00:0a" not in {e.mac for e in kernel.fdb_entries(vx9)}
    from pycni.net.netlink.kernel import Rule

    rule = Rule(AF_INET, 150, NET("10.72.0.5/32"), 1000)
    kernel.add_rule(rule)
    assert rule in kernel.rules(AF_INET)
    shown = ip_json(node, "rule", "show")
    assert any(r.get("src") == "10.72.0.5" and r.get("table") == "150" for r in shown)
    kernel.delete_rule(rule)
    assert rule not in kernel.rules(AF_INET)


@pytest.mark.kernel
def test_requests_act_on_the_clients_namespace(node: harness.Namespace, pod_factory: Any) -> None:
    """The calls pyroute2 once made for the native client (neighbours, FDB, vxlan, namespace
    ids) go on the client's socket too: with the thread in a pod, they change the node."""
    node.run("ip", "link", "add", "fb0", "type", "veth", "peer", "name", "fb1")
    node.run("ip", "link", "set", "fb0", "up")
    node.run("ip", "addr", "add", "10.80.0.1/24", "dev", "fb0")
    fb0 = ip_json(node, "link", "show", "fb0")[0]["ifindex"]
    pod = pod_factory()
    with node.entered():
        fast = NativeKernel()
    try:
        with pod.entered(), open(pod.path) as pod_ns:
            fast.set_neighbour(fb0, IP("10.80.0.7"), "02:00:00:00:00:07")
            fast.add_vxlan("vxfb0", 80, IP("10.80.0.1"), fb0, 4789, 1450)
            vx = fast.find_link("vxfb0")
            assert vx is not None
            fast.set_fdb(vx.index, "02:00:00:00:00:08", IP("10.80.0.8"))
            assert fast.netns_id(pod_ns.fileno()) is None  # nothing of the node's is there yet
            fast.add_veth("fbv0", "eth0", pod_ns.fileno())
            pod_id = fast.netns_id(pod_ns.fileno())
            neighbours = fast.neighbours(fb0, AF_INET)
            fdb = fast.fdb_entries(vx.index)
    finally:
        fast.close()
    assert IP("10.80.0.7") in {n.address for n in neighbours}
    assert ("02:00:00:00:00:08", IP("10.80.0.8")) in {(e.mac, e.remote) for e in fdb}
    (veth,) = ip_json(node, "link", "show", "fbv0")
    assert pod_id is not None and pod_id == veth["link_netnsid"]
    assert pod.run("ip", "-j", "neigh", "show").stdout.strip() == "[]"
    assert [d["ifname"] for d in ip_json(pod, "link", "show")] == ["lo", "eth0"]


def test_client_does_not_import_pyroute2(node: harness.Namespace) -> None:
    """Every kind of request, the ones pyroute2 once made included, in a fresh interpreter."""
    code = (
        "import ipaddress, sys\n"
        "from pycni.net.netlink.client import open_kernel\n"
        "k = open_kernel()\n"
        "here = open('/proc/thread-self/ns/net')\n"
        "lo = k.find_link('lo')\n"
        "k.set_link(lo.index, up=True)\n"
        "assert k.addresses(index=lo.index)\n"
        "k.link(lo.index)\n"
        "k.routes(2, table=254)\n"
        "k.add_veth('im0', 'im1', here.fileno())\n"
        "im0 = k.find_link('im0').index\n"
        "k.add_address(im0, ipaddress.ip_interface('10.81.0.1/24'))\n"
        "k.set_neighbour(im0, ipaddress.ip_address('10.81.0.2'), '02:00:00:00:00:02')\n"
        "k.neighbours(im0, 2)\n"
        "k.add_vxlan('imx0', 81, ipaddress.ip_address('10.81.0.1'), im0, 4789, 1450)\n"
        "imx0 = k.find_link('imx0').index\n"
        "k.set_fdb(imx0, '02:00:00:00:00:03', ipaddress.ip_address('10.81.0.3'))\n"
        "k.fdb_entries(imx0)\n"
        "k.netns_id(here.fileno())\n"
        "k.close()\n"
        "print(type(k).__name__, 'pyroute2' in sys.modules)\n"
    )
    out = node.run(sys.executable, "-c", code).stdout.split()
    assert out == ["NativeKernel", "False"]
    assert node.run("ip", "link", "show", "imx0").returncode == 0


def test_plugin_adds_do_not_import_pyroute2(node: harness.Namespace, pod_factory: Any) -> None:
    """loopback and bridge ADD/DEL in a fresh interpreter leave pyroute2 unimported."""
    pod = pod_factory()
    code = (
        "import json, sys\n"
        "from pycni.skel import run as skel\n"
        f"env = dict(CNI_CONTAINERID='c1', CNI_NETNS='{pod.path}', CNI_PATH='/nonexistent')\n"
        "lo = json.dumps({'cniVersion': '1.0.0', 'name': 'n', 'type': 'loopback'}).encode()\n"
        "br = json.dumps({'cniVersion': '1.0.0', 'name': 'n', 'type': 'bridge',\n"
        "                 'bridge': 'brfast0'}).encode()\n"
        "for cmd in ('ADD', 'DEL'):\n"
        "    for plugin, conf, ifname in (('loopback', lo, 'lo'), ('bridge', br, 'eth0')):\n"
        "        out = skel.run(plugin, dict(env, CNI_COMMAND=cmd, CNI_IFNAME=ifname), conf)\n"
        "        assert out.exit_code == 0, out.stdout\n"
        "print('pyroute2' in sys.modules)\n"
    )
    out = node.run(sys.executable, "-c", code).stdout.strip()
    assert out == "False"
    (br,) = ip_json(node, "link", "show", "brfast0")
    assert "UP" in br["flags"]
    assert [d["ifname"] for d in ip_json(pod, "link", "show")] == ["lo"]


@pytest.mark.kernel
def test_rules_read_as_iproute2_shows_them(node: harness.Namespace, kernel: Kernel) -> None:
    """What the client adds, it reads back, and iproute2 shows the same rules (a table above
    255, a rule without a source, IPv6)."""
    from pycni.net.netlink.kernel import Rule

    added = [
        Rule(AF_INET, 150, NET("10.73.0.5/32"), 1000),
        Rule(AF_INET, 70000, NET("10.73.1.0/24"), 1001),
        Rule(AF_INET, 151, None, 1002),
        Rule(AF_INET6, 152, NET("fd73::/64"), 1003),
    ]
    for rule in added:
        kernel.add_rule(rule)
    with pytest.raises(NetlinkError) as exc:
        kernel.add_rule(added[0])
    assert exc.value.exists
    for family, flag in ((AF_INET, "-4"), (AF_INET6, "-6")):
        shown = {
            (r["priority"], int(_TABLES.get(r["table"], r["table"])), _rule_src(r, family))
            for r in ip_json(node, flag, "rule", "show")
        }
        assert {(r.priority or 0, r.table, r.src) for r in kernel.rules(family)} == shown
    assert set(added) <= set(kernel.rules(AF_INET)) | set(kernel.rules(AF_INET6))
    for rule in added:
        kernel.delete_rule(rule)
    assert not set(added) & (set(kernel.rules(AF_INET)) | set(kernel.rules(AF_INET6)))


def _rule_src(shown: dict[str, Any], family: int) -> Any:
    """The rule's source as the client's Rule holds it (None for "all")."""
    src = shown.get("src")
    if src is None or src == "all":
        return None
    full = 32 if family == AF_INET else 128
    return NET(f"{src}/{shown.get('srclen', full)}")


def _tc_view(node: harness.Namespace, *args: str) -> list[dict[str, Any]]:
    """``tc -j`` output without what differs between two links (their index and counters)."""
    shown: list[dict[str, Any]] = json.loads(node.run("tc", "-j", *args).stdout or "[]")
    drop = {"dev", "ifindex", "ref", "refcnt", "stats", "bytes", "packets", "index"}

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return [clean(item) for item in shown]


@pytest.mark.kernel
def test_traffic_control_as_iproute2_makes_it(node: harness.Namespace, kernel: Kernel) -> None:
    """The bandwidth plugin's tc objects: the tbf root qdisc and the ingress qdisc read as
    iproute2's ``tc`` shows the same ones made by ``tc`` itself on another link; the u32
    match-all filter redirects to the ifb with the reference's two mirred actions; the client
    reads them back and removes them."""
    from pycni.net.netlink.kernel import Tbf

    for name in ("tcf0", "tcs0"):
        node.run("ip", "link", "add", name, "type", "veth", "peer", "name", name + "p")
        node.run("ip", "link", "add", name + "i", "type", "ifb")
        node.run("ip", "link", "set", name, "up")
    index = ip_json(node, "link", "show", "tcf0")[0]["ifindex"]
    target = ip_json(node, "link", "show", "tcf0i")[0]["ifindex"]
    params = Tbf(rate=125_000, buffer=400_000, limit=51_200)  # 1 Mbit/s, 25.6 ms of burst
    kernel.add_tbf(index, 0x00010000, params)
    kernel.add_ingress(index)
    kernel.redirect_ingress(index, target)
    node.run("tc", "qdisc", "add", "dev", "tcs0", "root", "handle", "1:", "tbf", "rate", "1mbit",
             "burst", "3200", "limit", "51200")  # fmt: skip
    node.run("tc", "qdisc", "add", "dev", "tcs0", "ingress")
    with pytest.raises(NetlinkError) as exc:
        kernel.add_ingress(index)
    assert exc.value.exists
    assert _tc_view(node, "qdisc", "show", "dev", "tcf0") == _tc_view(
        node, "qdisc", "show", "dev", "tcs0"
    )
    (rule,) = [f for f in _tc_view(node, "filter", "show", "dev", "tcf0", "ingress") if
               "actions" in f.get("options", {})]  # fmt: skip
    assert (rule["protocol"], rule["pref"], rule["options"]["flowid"]) == ("all", 1, "1:1")
    assert [
        (a["kind"], a["mirred_action"], a["direction"], a["to_dev"], a["control_action"]["type"])
        for a in rule["options"]["actions"]
    ] == [
        ("mirred", "redirect", "egress", "tcf0i", "stolen"),
        ("mirred", "redirect", "egress", "tcf0i", "pass"),
    ]
    mine = kernel.qdiscs(index)
    (tbf,) = [q for q in mine if q.kind == "tbf"]
    assert tbf.tbf == params and tbf.handle == 0x00010000
    assert any(q.kind == "ingress" for q in mine)
    kernel.delete_qdisc(index, 0xFFFFFFFF)
    kernel.delete_qdisc(index, 0xFFFFFFF1)
    assert {q.kind for q in kernel.qdiscs(index)} <= {"noqueue", "pfifo_fast"}
