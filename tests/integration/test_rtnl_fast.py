"""The native rtnetlink client (pycni.net.rtnl) against the real kernel, in private namespaces.

Every native call is compared with what iproute2 reports and with pyroute2's answer for the
same object; errors carry the errno in ``.code``; what is not native goes to pyroute2 in the
client's own namespace; creating the client does not import pyroute2.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2 import IPRoute

from pycni.net.rtnl import HybridIPRoute, RtnlError
from tests import harness

LINK_ATTRS = (
    "IFLA_IFNAME",
    "IFLA_ADDRESS",
    "IFLA_MTU",
    "IFLA_MASTER",
    "IFLA_LINK",
    "IFLA_OPERSTATE",
    "IFLA_TXQLEN",
    "IFLA_PROMISCUITY",
    "IFLA_IFALIAS",
    "IFLA_LINK_NETNSID",
)


def ip_json(ns: harness.Namespace, *argv: str) -> Any:
    return json.loads(ns.run("ip", "-j", "-d", *argv).stdout)


@pytest.fixture
def hyb(node: harness.Namespace) -> Iterator[tuple[HybridIPRoute, Any]]:
    """The native client and a pyroute2 IPRoute, both opened in the node namespace."""
    with node.entered():
        fast = HybridIPRoute()
        slow = IPRoute()
    try:
        yield fast, slow
    finally:
        fast.close()
        slow.close()


def assert_same_link(fast: Any, slow: Any) -> None:
    assert fast["index"] == slow["index"]
    assert fast["flags"] == slow["flags"]
    assert fast["family"] == slow["family"]
    for name in LINK_ATTRS:
        assert fast.get_attr(name) == slow.get_attr(name), name
    fast_info, slow_info = fast.get_attr("IFLA_LINKINFO"), slow.get_attr("IFLA_LINKINFO")
    assert (fast_info is None) == (slow_info is None)
    if fast_info is not None:
        assert fast_info.get_attr("IFLA_INFO_KIND") == slow_info.get_attr("IFLA_INFO_KIND")


@pytest.mark.kernel
def test_link_get_lookup_and_errors(node: harness.Namespace, hyb: Any) -> None:
    fast, slow = hyb
    node.run("ip", "link", "add", "br7", "mtu", "1400", "type", "bridge")
    node.run("ip", "link", "add", "va", "type", "veth", "peer", "name", "vb")
    node.run("ip", "link", "set", "va", "master", "br7", "up")
    node.run("ip", "link", "set", "br7", "alias", "hello", "up")
    shown = {d["ifname"]: d for d in ip_json(node, "link", "show")}
    for name in ("lo", "br7", "va", "vb"):
        (index,) = fast.link_lookup(ifname=name)
        assert index == shown[name]["ifindex"]
        (msg,) = fast.get_links(index)
        assert_same_link(msg, slow.get_links(index)[0])
        assert msg.get_attr("IFLA_ADDRESS") == shown[name]["address"]
        assert msg.get_attr("IFLA_MTU") == shown[name]["mtu"]
        assert fast.link("get", ifname=name)[0]["index"] == index
    br = fast.get_links(fast.link_lookup(ifname="br7")[0])[0]
    assert br.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND") == "bridge"
    assert br.get_attr("IFLA_IFALIAS") == "hello"
    va = fast.link("get", ifname="va")[0]
    assert va.get_attr("IFLA_MASTER") == br["index"]
    dumped = {m.get_attr("IFLA_IFNAME"): m for m in fast.get_links()}
    assert set(dumped) == set(shown)
    for m in slow.get_links():
        assert_same_link(dumped[m.get_attr("IFLA_IFNAME")], m)
    assert fast.link_lookup(ifname="nosuch0") == []
    with pytest.raises(RtnlError) as exc:
        fast.get_links(99999)
    assert exc.value.code == errno.ENODEV
    with pytest.raises(KeyError):
        br.get_attr("IFLA_NOT_DECODED")


@pytest.mark.kernel
def test_bridge_and_veth_add_with_peer_in_pod(
    node: harness.Namespace, pod_factory: Any, hyb: Any
) -> None:
    fast, _ = hyb
    pod = pod_factory()
    fast.link("add", ifname="br8", kind="bridge", mtu=1450)
    with pytest.raises(RtnlError) as exc:
        fast.link("add", ifname="br8", kind="bridge")
    assert exc.value.code == errno.EEXIST
    (br,) = ip_json(node, "link", "show", "br8")
    assert br["mtu"] == 1450 and br["linkinfo"]["info_kind"] == "bridge"
    with open(pod.path) as pod_ns:
        fast.link(
            "add",
            ifname="vethab12cd34",
            kind="veth",
            mtu=1450,
            peer={
                "ifname": "eth0",
                "net_ns_fd": pod_ns.fileno(),
                "mtu": 1450,
                "address": "02:11:22:33:44:55",
            },
        )
    (host,) = ip_json(node, "link", "show", "vethab12cd34")
    assert host["mtu"] == 1450 and host["linkinfo"]["info_kind"] == "veth"
    (peer,) = ip_json(pod, "link", "show", "eth0")
    assert peer["address"] == "02:11:22:33:44:55" and peer["mtu"] == 1450
    assert peer["linkinfo"]["info_kind"] == "veth"
    host_index = host["ifindex"]
    assert fast.get_links(host_index)[0].get_attr("IFLA_LINK") == peer["ifindex"]
    fast.link("del", index=host_index)
    assert fast.link_lookup(ifname="vethab12cd34") == []
    with pytest.raises(RtnlError) as exc:
        fast.link("del", index=host_index)
    assert exc.value.code == errno.ENODEV


@pytest.mark.kernel
def test_link_set(node: harness.Namespace, pod_factory: Any, hyb: Any) -> None:
    fast, _ = hyb
    node.run("ip", "link", "add", "br9", "type", "bridge")
    node.run("ip", "link", "add", "sa", "type", "veth", "peer", "name", "sb")
    br = fast.link_lookup(ifname="br9")[0]
    sa = fast.link_lookup(ifname="sa")[0]
    fast.link("set", index=br, state="up")
    fast.link("set", index=sa, master=br)
    fast.link("set", index=sa, mtu=1300)
    fast.link("set", index=sa, address="02:aa:bb:cc:dd:ee")
    fast.link("set", index=sa, flags=0x100, change=0x100)  # promisc
    fast.link("set", index=sa, txqlen=77)
    fast.link("set", index=sa, ifalias="port")
    fast.link("set", index=sa, state="up")
    (shown,) = ip_json(node, "link", "show", "sa")
    assert "UP" in shown["flags"] and "PROMISC" in shown["flags"]
    assert shown["master"] == "br9" and shown["mtu"] == 1300 and shown["txqlen"] == 77
    assert shown["address"] == "02:aa:bb:cc:dd:ee" and shown["ifalias"] == "port"
    assert "UP" in ip_json(node, "link", "show", "br9")[0]["flags"]
    fast.link("set", index=sa, state="down")
    fast.link("set", index=sa, flags=0, change=0x100)
    fast.link("set", index=sa, ifname="renamed")
    (shown,) = ip_json(node, "link", "show", "renamed")
    assert "UP" not in shown["flags"] and "PROMISC" not in shown["flags"]
    pod = pod_factory()
    with open(pod.path) as pod_ns:
        fast.link("set", index=sa, net_ns_fd=pod_ns.fileno(), ifname="moved")
    assert fast.link_lookup(ifname="renamed") == []
    assert ip_json(pod, "link", "show", "moved")[0]["link_type"] == "ether"
    with pytest.raises(RtnlError) as exc:
        fast.link("set", index=99999, state="up")
    assert exc.value.code == errno.ENODEV


@pytest.mark.kernel
def test_addresses(node: harness.Namespace, hyb: Any) -> None:
    fast, slow = hyb
    node.run("ip", "link", "add", "ad0", "type", "veth", "peer", "name", "ad1")
    node.run("ip", "addr", "add", "10.40.0.9/16", "dev", "ad1")  # another link: filtered out
    idx = fast.link_lookup(ifname="ad0")[0]
    fast.addr("add", index=idx, address="10.44.0.1", prefixlen=24)
    fast.addr("add", index=idx, address="fd44::1", prefixlen=64)
    with pytest.raises(RtnlError) as exc:
        fast.addr("add", index=idx, address="10.44.0.1", prefixlen=24)
    assert exc.value.code == errno.EEXIST
    (shown,) = ip_json(node, "addr", "show", "dev", "ad0")
    got = {(a["local"], a["prefixlen"]) for a in shown["addr_info"]}
    assert {("10.44.0.1", 24), ("fd44::1", 64)} <= got
    v4 = next(a for a in shown["addr_info"] if a["family"] == "inet")
    assert "broadcast" not in v4  # as pyroute2 adds it: no broadcast unless asked
    fast_msgs = fast.get_addr(index=idx)
    slow_msgs = [m for m in slow.get_addr(index=idx)]
    assert len(fast_msgs) == len(slow_msgs) == len(shown["addr_info"])
    for f, s in zip(fast_msgs, slow_msgs, strict=True):
        for key in ("family", "prefixlen", "index", "scope"):
            assert f[key] == s[key]
        for name in ("IFA_ADDRESS", "IFA_LOCAL", "IFA_FLAGS", "IFA_LABEL"):
            assert f.get_attr(name) == s.get_attr(name), name
    assert {m.get_attr("IFA_ADDRESS") for m in fast.get_addr(index=idx, family=10)} == {"fd44::1"}
    fast.addr("del", index=idx, address="10.44.0.1", prefixlen=24)
    fast.addr("del", index=idx, address="fd44::1", prefixlen=64)
    assert ip_json(node, "addr", "show", "dev", "ad0")[0]["addr_info"] == []
    with pytest.raises(RtnlError) as exc:
        fast.addr("del", index=idx, address="10.44.0.1", prefixlen=24)
    assert exc.value.code == errno.EADDRNOTAVAIL


@pytest.mark.kernel
def test_routes(node: harness.Namespace, hyb: Any) -> None:
    fast, slow = hyb
    node.run("ip", "link", "add", "rt0", "type", "veth", "peer", "name", "rt1")
    node.run("ip", "link", "set", "rt0", "up")
    node.run("ip", "link", "set", "rt1", "up")
    node.run("ip", "addr", "add", "10.50.0.1/24", "dev", "rt0")
    node.run("ip", "addr", "add", "fd50::1/64", "dev", "rt0")
    idx = fast.link_lookup(ifname="rt0")[0]
    fast.route("add", dst="10.60.0.0/16", gateway="10.50.0.2", oif=idx, proto=3)
    fast.route("add", dst="10.61.0.0/16", oif=idx, scope=253, priority=7, proto=3)
    fast.route("add", dst="0.0.0.0/0", gateway="10.50.0.2", oif=idx, proto=3, table=100)
    fast.route("add", dst="fd60::/48", gateway="fd50::2", oif=idx, proto=3)
    fast.route("add", dst="10.62.0.0/16", oif=idx, metrics={"RTAX_MTU": 1200, "RTAX_ADVMSS": 1100})
    with pytest.raises(RtnlError) as exc:
        fast.route("add", dst="10.60.0.0/16", gateway="10.50.0.2", oif=idx, proto=3)
    assert exc.value.code == errno.EEXIST
    main = {r["dst"]: r for r in ip_json(node, "route", "show")}
    assert main["10.60.0.0/16"]["gateway"] == "10.50.0.2"
    assert main["10.60.0.0/16"]["protocol"] == "boot"
    assert main["10.61.0.0/16"]["scope"] == "link" and main["10.61.0.0/16"]["metric"] == 7
    metrics = {k: v for d in main["10.62.0.0/16"]["metrics"] for k, v in d.items()}
    assert metrics == {"mtu": 1200, "advmss": 1100}
    assert main["10.62.0.0/16"]["protocol"] == "static"  # pyroute2's default
    (default,) = ip_json(node, "route", "show", "table", "100")
    assert default["dst"] == "default" and default["gateway"] == "10.50.0.2"
    v6 = {r["dst"]: r for r in ip_json(node, "-6", "route", "show")}
    assert v6["fd60::/48"]["gateway"] == "fd50::2"
    fast.route("replace", dst="10.60.0.0/16", gateway="10.50.0.3", oif=idx, proto=3)
    main = {r["dst"]: r for r in ip_json(node, "route", "show")}
    assert main["10.60.0.0/16"]["gateway"] == "10.50.0.3"
    (got,) = fast.route("get", dst="10.60.1.1")
    (want,) = slow.route("get", dst="10.60.1.1")
    for name in ("RTA_OIF", "RTA_GATEWAY", "RTA_DST", "RTA_PREFSRC", "RTA_TABLE"):
        assert got.get_attr(name) == want.get_attr(name), name
    for key in ("family", "dst_len", "table", "type"):
        assert got[key] == want[key]
    assert got.get_attr("RTA_OIF") == idx
    fast.route("del", dst="10.60.0.0/16", gateway="10.50.0.3", oif=idx, proto=3)
    assert "10.60.0.0/16" not in {r["dst"] for r in ip_json(node, "route", "show")}
    with pytest.raises(RtnlError) as exc:
        fast.route("del", dst="10.60.0.0/16", oif=idx)
    assert exc.value.code == errno.ESRCH
    # a spelling the native path does not parse goes to pyroute2
    fast.route("add", dst="default", gateway="10.50.0.2", oif=idx, table=101)
    assert ip_json(node, "route", "show", "table", "101")[0]["gateway"] == "10.50.0.2"
    # as pyroute2: a delete without proto matches the kernel's own subnet route (ptp does this)
    fast.route("del", dst="10.50.0.0/24", oif=idx, scope=253)
    assert "10.50.0.0/24" not in {r["dst"] for r in ip_json(node, "route", "show")}


@pytest.mark.kernel
def test_info_data_of_macvlan_and_vxlan(node: harness.Namespace, hyb: Any) -> None:
    fast, slow = hyb
    node.run("ip", "link", "add", "mv0", "type", "veth", "peer", "name", "mv1")
    node.run("ip", "link", "add", "mvl", "link", "mv0", "type", "macvlan", "mode", "bridge")
    node.run("ip", "addr", "add", "10.70.0.1/24", "dev", "mv0")
    node.run(
        "ip", "link", "add", "vx7", "type", "vxlan", "id", "42", "local", "10.70.0.1",
        "dev", "mv0", "dstport", "4789", "nolearning",
    )  # fmt: skip
    for name, keys in (
        ("mvl", ("IFLA_MACVLAN_MODE",)),
        ("vx7", ("IFLA_VXLAN_ID", "IFLA_VXLAN_LOCAL", "IFLA_VXLAN_PORT", "IFLA_VXLAN_LEARNING")),
    ):
        idx = fast.link_lookup(ifname=name)[0]
        f = fast.get_links(idx)[0].get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_DATA")
        s = slow.get_links(idx)[0].get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_DATA")
        for key in keys:
            want = s.get_attr(key)
            if key == "IFLA_MACVLAN_MODE" and isinstance(want, str):
                assert want == "bridge" and f.get_attr(key) == 4
            else:
                assert f.get_attr(key) == want, key
    vx = fast.get_links(fast.link_lookup(ifname="vx7")[0])[0]
    data = vx.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_DATA")
    assert data.get_attr("IFLA_VXLAN_ID") == 42 and data.get_attr("IFLA_VXLAN_PORT") == 4789


@pytest.mark.kernel
def test_fallback_runs_in_the_clients_namespace(node: harness.Namespace, pod_factory: Any) -> None:
    node.run("ip", "link", "add", "fb0", "type", "veth", "peer", "name", "fb1")
    node.run("ip", "link", "set", "fb0", "up")
    node.run("ip", "addr", "add", "10.80.0.1/24", "dev", "fb0")
    pod = pod_factory()
    with node.entered():
        fast = HybridIPRoute()
    try:
        with pod.entered():  # the thread is elsewhere when the fallback is first needed
            routes = fast.get_routes(family=2, table=254)  # not native: pyroute2
            assert fast.link_lookup(ifname="fb0")
        assert fast._fallback is not None
        assert "10.80.0.0" in {r.get_attr("RTA_DST") for r in routes}
        # a native call with arguments it does not know goes to pyroute2 too
        mac = ip_json(node, "link", "show", "fb0")[0]["address"]
        assert fast.link_lookup(address=mac) == fast.link_lookup(ifname="fb0")
        assert pod.run("ip", "-j", "route", "show").stdout.strip() == "[]"
    finally:
        fast.close()


def test_client_does_not_import_pyroute2(node: harness.Namespace) -> None:
    code = (
        "import sys\n"
        "from pycni.net.rtnl import open_rtnl\n"
        "ipr = open_rtnl()\n"
        "idx = ipr.link_lookup(ifname='lo')[0]\n"
        "ipr.link('set', index=idx, state='up')\n"
        "assert ipr.get_addr(index=idx)\n"
        "ipr.get_links(idx)\n"
        "ipr.close()\n"
        "print('pyroute2' in sys.modules)\n"
    )
    out = node.run(sys.executable, "-c", code).stdout.strip()
    assert out == "False"


def test_switch_back_to_pyroute2(node: harness.Namespace) -> None:
    code = (
        "from pycni.net.rtnl import open_rtnl\n"
        "ipr = open_rtnl()\n"
        "print(type(ipr).__module__.split('.')[0], ipr.link_lookup(ifname='lo'))\n"
        "ipr.close()\n"
    )
    env = dict(os.environ, PYCNI_NETLINK="pyroute2")
    out = node.run(sys.executable, "-c", code, env=env).stdout.split()
    assert out == ["pyroute2", "[1]"]
    env.pop("PYCNI_NETLINK")
    out = node.run(sys.executable, "-c", code, env=env).stdout.split()
    assert out == ["pycni", "[1]"]


def test_plugin_adds_do_not_import_pyroute2(node: harness.Namespace, pod_factory: Any) -> None:
    """loopback and bridge ADD/DEL in a fresh interpreter leave pyroute2 unimported."""
    pod = pod_factory()
    code = (
        "import json, sys\n"
        "from pycni.plugin import skel\n"
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
