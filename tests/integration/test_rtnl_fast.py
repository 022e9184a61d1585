"""Both Kernel implementations (net/netlink/kernel.py) against the real kernel, in private netns.

Every test runs on the native client and on the pyroute2 adapter: each call is checked
against what iproute2 reports, both give equal dataclasses for the same objects, errors are
one NetlinkError with the errno by name, what the native client does not encode goes to
pyroute2 in the client's own namespace, and the native client does not import pyroute2.
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
from pycni.net.netlink.rtnl.pyroute2_adapter import Pyroute2Kernel
from tests import harness

IP = ipaddress.ip_address
NET = ipaddress.ip_network
IFACE = ipaddress.ip_interface


def ip_json(ns: harness.Namespace, *argv: str) -> Any:
    return json.loads(ns.run("ip", "-j", "-d", *argv).stdout)


def _open(kind: str) -> Kernel:
    return NativeKernel() if kind == "native" else Pyroute2Kernel.open()


@pytest.fixture(params=["native", "pyroute2"])
def kernel(request: pytest.FixtureRequest, node: harness.Namespace) -> Iterator[Kernel]:
    """Each implementation, opened in the node namespace."""
    with node.entered():
        client = _open(str(request.param))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def both(node: harness.Namespace) -> Iterator[tuple[Kernel, Kernel]]:
    """The native client and the pyroute2 adapter side by side in the node namespace."""
    with node.entered():
        fast, slow = NativeKernel(), Pyroute2Kernel.open()
    try:
        yield fast, slow
    finally:
        fast.close()
        slow.close()


@pytest.mark.kernel
def test_links_decode_the_same_in_both(node: harness.Namespace, both: Any) -> None:
    fast, slow = both
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
    assert sorted(fast.links(), key=lambda x: x.index) == sorted(
        slow.links(), key=lambda x: x.index
    )
    for name, info in shown.items():
        got = fast.find_link(name)
        assert got is not None and got == slow.find_link(name)
        assert got.index == info["ifindex"] and got.mtu == info["mtu"]
        assert got.mac == info.get("address", "") and fast.link(got.index) == got
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
def test_addresses(node: harness.Namespace, both: Any) -> None:
    fast, slow = both
    node.run("ip", "link", "add", "ad0", "type", "veth", "peer", "name", "ad1")
    node.run("ip", "addr", "add", "10.40.0.9/16", "dev", "ad1")  # another link: filtered out
    idx = ip_json(node, "link", "show", "ad0")[0]["ifindex"]
    for kernel, v4, v6 in ((fast, "10.44.0.1/24", "fd44::1/64"), (slow, "10.45.0.1/24", "")):
        kernel.add_address(idx, IFACE(v4))
        if v6:
            kernel.add_address(idx, IFACE(v6))
        with pytest.raises(NetlinkError) as exc:
            kernel.add_address(idx, IFACE(v4))
        assert exc.value.exists
    kernel_flags = 0x02  # IFA_F_NODAD
    fast.add_address(idx, IFACE("fd45::1/64"), kernel_flags)
    (shown,) = ip_json(node, "addr", "show", "dev", "ad0")
    got = {(a["local"], a["prefixlen"]) for a in shown["addr_info"]}
    assert {("10.44.0.1", 24), ("fd44::1", 64), ("10.45.0.1", 24), ("fd45::1", 64)} <= got
    # both add IPv4 addresses with the subnet's broadcast, as Go's netlink library does
    brd = {a["local"]: a.get("broadcast") for a in shown["addr_info"] if a["family"] == "inet"}
    assert brd == {"10.44.0.1": "10.44.0.255", "10.45.0.1": "10.45.0.255"}
    fast.add_address(idx, IFACE("10.46.0.1/31"))
    slow.add_address(idx, IFACE("10.46.0.3/32"))
    (now,) = ip_json(node, "addr", "show", "dev", "ad0")
    point = {a["local"]: a.get("broadcast") for a in now["addr_info"] if a["family"] == "inet"}
    assert point["10.46.0.1"] is None and point["10.46.0.3"] is None  # RFC 3021: none for /31
    fast.delete_address(idx, IFACE("10.46.0.1/31"))
    slow.delete_address(idx, IFACE("10.46.0.3/32"))
    assert fast.addresses(index=idx) == slow.addresses(index=idx)
    assert len(fast.addresses(index=idx)) == len(shown["addr_info"])
    assert {a.interface.ip for a in fast.addresses(index=idx, family=AF_INET6)} >= {
        IP("fd44::1"),
        IP("fd45::1"),
    }
    assert all(a.family == AF_INET6 for a in slow.addresses(index=idx, family=AF_INET6))
    nodad = next(a for a in fast.addresses(index=idx) if a.interface == IFACE("fd45::1/64"))
    assert nodad.flags & 0x02
    fast.delete_address(idx, IFACE("10.44.0.1/24"))
    slow.delete_address(idx, IFACE("10.45.0.1/24"))
    assert not [a for a in fast.addresses(index=idx, family=AF_INET)]
    with pytest.raises(NetlinkError) as exc:
        slow.delete_address(idx, IFACE("10.44.0.1/24"))
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
def test_routes_decode_the_same_in_both(node: harness.Namespace, both: Any) -> None:
    fast, slow = both
    node.run("ip", "link", "add", "rd0", "type", "veth", "peer", "name", "rd1")
    node.run("ip", "link", "set", "rd0", "up")
    node.run("ip", "addr", "add", "10.51.0.1/24", "dev", "rd0")
    node.run("ip", "route", "add", "10.52.0.0/16", "via", "10.51.0.2", "metric", "5")
    node.run("ip", "route", "add", "10.53.0.0/16", "dev", "rd0", "src", "10.51.0.1", "mtu", "1300")
    for family in (AF_INET, AF_INET6):
        assert fast.routes(family) == slow.routes(family)
        assert fast.routes(family, table=254) == slow.routes(family, table=254)


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
def test_fallback_runs_in_the_clients_namespace(node: harness.Namespace, pod_factory: Any) -> None:
    node.run("ip", "link", "add", "fb0", "type", "veth", "peer", "name", "fb1")
    node.run("ip", "link", "set", "fb0", "up")
    node.run("ip", "addr", "add", "10.80.0.1/24", "dev", "fb0")
    fb0 = ip_json(node, "link", "show", "fb0")[0]["ifindex"]
    pod = pod_factory()
    with node.entered():
        fast = NativeKernel()
    try:
        with pod.entered():  # the thread is elsewhere when the fallback is first needed
            fast.set_neighbour(fb0, IP("10.80.0.7"), "02:00:00:00:00:07")  # not native: pyroute2
            assert fast.find_link("fb0") is not None
        assert fast._fallback is not None
        assert IP("10.80.0.7") in {n.address for n in fast.neighbours(fb0, AF_INET)}
        assert pod.run("ip", "-j", "neigh", "show").stdout.strip() == "[]"
    finally:
        fast.close()


def _native_env() -> dict[str, str]:
    """This environment with the default (native) backend, whichever the suite runs on."""
    return {k: v for k, v in os.environ.items() if k != "PYCNI_NETLINK"}


def test_client_does_not_import_pyroute2(node: harness.Namespace) -> None:
    code = (
        "import sys\n"
        "from pycni.net.netlink.client import open_kernel\n"
        "k = open_kernel()\n"
        "lo = k.find_link('lo')\n"
        "k.set_link(lo.index, up=True)\n"
        "assert k.addresses(index=lo.index)\n"
        "k.link(lo.index)\n"
        "k.routes(2, table=254)\n"
        "k.close()\n"
        "print(type(k).__name__, 'pyroute2' in sys.modules)\n"
    )
    out = node.run(sys.executable, "-c", code, env=_native_env()).stdout.split()
    assert out == ["NativeKernel", "False"]


def test_switch_back_to_pyroute2(node: harness.Namespace) -> None:
    code = (
        "from pycni.net.netlink.client import open_kernel\n"
        "k = open_kernel()\n"
        "print(type(k).__name__, k.find_link('lo').index)\n"
        "k.close()\n"
    )
    env = dict(os.environ, PYCNI_NETLINK="pyroute2")
    out = node.run(sys.executable, "-c", code, env=env).stdout.split()
    assert out == ["Pyroute2Kernel", "1"]
    env.pop("PYCNI_NETLINK")
    out = node.run(sys.executable, "-c", code, env=env).stdout.split()
    assert out == ["NativeKernel", "1"]


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
    out = node.run(sys.executable, "-c", code, env=_native_env()).stdout.strip()
    assert out == "False"
    (br,) = ip_json(node, "link", "show", "brfast0")
    assert "UP" in br["flags"]
    assert [d["ifname"] for d in ip_json(pod, "link", "show")] == ["lo"]


@pytest.mark.kernel
def test_rules_read_alike_on_both_backends(node: harness.Namespace, both: Any) -> None:
    """Policy rules are native now: what each backend adds, both read back the same, with
    iproute2's view of them (a table above 255, a rule without a source, IPv6)."""
    from pycni.net.netlink.kernel import Rule

    fast, slow = both
    added = [
        Rule(AF_INET, 150, NET("10.73.0.5/32"), 1000),
        Rule(AF_INET, 70000, NET("10.73.1.0/24"), 1001),
        Rule(AF_INET, 151, None, 1002),
        Rule(AF_INET6, 152, NET("fd73::/64"), 1003),
    ]
    for i, rule in enumerate(added):
        (fast if i % 2 else slow).add_rule(rule)
    with pytest.raises(NetlinkError) as exc:
        fast.add_rule(added[0])
    assert exc.value.exists
    for family in (AF_INET, AF_INET6):
        assert fast.rules(family) == slow.rules(family)
    assert set(added) <= set(fast.rules(AF_INET)) | set(fast.rules(AF_INET6))
    shown = ip_json(node, "rule", "show")
    assert any(r.get("src") == "10.73.1.0" and r.get("table") == "70000" for r in shown)
    for i, rule in enumerate(added):
        (slow if i % 2 else fast).delete_rule(rule)
    assert not set(added) & (set(fast.rules(AF_INET)) | set(fast.rules(AF_INET6)))


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
def test_traffic_control_alike_on_both_backends(node: harness.Namespace, both: Any) -> None:
    """The bandwidth plugin's tc objects (tbf root qdisc, ingress qdisc, u32 match-all filter
    redirecting to an ifb) are native now: each backend builds them on its own link and
    iproute2's ``tc`` shows the same objects; both backends read them back alike."""
    from pycni.net.netlink.kernel import Tbf

    fast, slow = both
    for name in ("tcf0", "tcs0"):
        node.run("ip", "link", "add", name, "type", "veth", "peer", "name", name + "p")
        node.run("ip", "link", "add", name + "i", "type", "ifb")
        node.run("ip", "link", "set", name, "up")
    index = {n: ip_json(node, "link", "show", n)[0]["ifindex"] for n in ("tcf0", "tcs0")}
    target = {n: ip_json(node, "link", "show", n + "i")[0]["ifindex"] for n in ("tcf0", "tcs0")}
    params = Tbf(rate=125_000, buffer=400_000, limit=51_200)
    for kernel, name in ((fast, "tcf0"), (slow, "tcs0")):
        kernel.add_tbf(index[name], 0x00010000, params)
        kernel.add_ingress(index[name])
        kernel.redirect_ingress(index[name], target[name])
    with pytest.raises(NetlinkError) as exc:
        fast.add_ingress(index["tcf0"])
    assert exc.value.exists
    assert _tc_view(node, "qdisc", "show", "dev", "tcf0") == _tc_view(
        node, "qdisc", "show", "dev", "tcs0"
    )
    fast_filters = json.dumps(_tc_view(node, "filter", "show", "dev", "tcf0", "ingress"))
    slow_filters = json.dumps(_tc_view(node, "filter", "show", "dev", "tcs0", "ingress"))
    assert '"to_dev": "tcf0i"' in fast_filters  # the only difference: each redirects to its own
    assert fast_filters.replace("tcf0i", "tcs0i") == slow_filters
    text = node.run("tc", "filter", "show", "dev", "tcf0", "ingress").stdout
    assert "mirred (Egress Redirect to device tcf0i)" in text
    for name in ("tcf0", "tcs0"):
        mine = fast.qdiscs(index[name])
        assert mine == slow.qdiscs(index[name])
        (tbf,) = [q for q in mine if q.kind == "tbf"]
        assert tbf.tbf == params and tbf.handle == 0x00010000
        assert any(q.kind == "ingress" for q in mine)
    fast.delete_qdisc(index["tcf0"], 0xFFFFFFFF)
    fast.delete_qdisc(index["tcf0"], 0xFFFFFFF1)
    assert {q.kind for q in slow.qdiscs(index["tcf0"])} <= {"noqueue", "pfifo_fast"}
