"""The contract of FakeKernel (net/netlink/fake_kernel.py): cases run on it and the real kernel.

Each case drives a ``Kernel`` pair (one for the node namespace, one for a pod namespace) and
returns plain values: what calls returned, the errno name of each refusal ("ok" when accepted)
and a normalized view of the namespaces afterwards (names instead of interface indexes, which
differ between kernels; no randomly made MAC addresses). ``EXPECTED`` holds what the real
kernel answered when the case was written. tests/unit/test_fake_kernel.py checks the fake
against it (no root, no namespaces, well under a second); the kernel suite
(tests/integration/test_fake_kernel_contract.py) checks the native client in private
namespaces against the same values and against the fake, so neither side can drift alone.

A case that the fake cannot answer like the kernel does not belong here until the fake can:
the docstring of pycni.net.netlink.fake_kernel lists what it leaves out.
"""

from __future__ import annotations

import errno
import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pycni.net.netlink.fake_kernel import FakeKernel, FakeMachine
from pycni.net.netlink.kernel import (
    AF_INET,
    AF_INET6,
    IFF_PROMISC,
    IFF_UP,
    IPV4_DEVCONF_ARP_NOTIFY,
    Kernel,
    Route,
    Rule,
)
from pycni.net.ns import entered_fd
from pycni.net.sysctl import THREAD, Sysctl
from pycni.plugins.main.tap import tun

IP = ipaddress.ip_address
NET = ipaddress.ip_network
IFACE = ipaddress.ip_interface


@dataclass
class Side:
    """One implementation's view: a Kernel in the node namespace and one in a pod namespace,
    with the namespace handles (fds) that calls moving or creating links across take."""

    node: Kernel
    pod: Kernel
    node_fd: int
    pod_fd: int
    node_sysctl: Sysctl | None = None  # the namespaces' /proc/sys/net (pycni.net.sysctl)
    pod_sysctl: Sysctl | None = None
    # a tap in the pod as pycni.plugins.main.tap.tun.create_tap makes it: (name, multi_queue)
    pod_tap: Callable[[str, bool], None] | None = None


def on_fake(case: Callable[[Side], Any]) -> Any:
    """What the fake answers ``case``: a node and a pod namespace of a new FakeMachine."""
    host = FakeMachine()
    node, pod = host.namespace(), host.namespace()
    side = Side(FakeKernel(node), FakeKernel(pod), node.fd, pod.fd, node.sysctl, pod.sysctl)
    side.pod_tap = FakeKernel(pod).add_tap
    return case(side)


def on_kernel(
    case: Callable[[Side], Any], node: Any, pod: Any, open_kernel: Callable[[], Kernel]
) -> Any:
    """What the real kernel answers ``case`` in two namespaces (tests.harness.Namespace: a
    client opened inside each, their sysctls read and written from a thread inside)."""
    with node.entered():
        node_kernel = open_kernel()
    with pod.entered():
        pod_kernel = open_kernel()
    node_fd = os.open(node.path, os.O_RDONLY)
    pod_fd = os.open(pod.path, os.O_RDONLY)
    try:
        side = Side(
            node_kernel,
            pod_kernel,
            node_fd,
            pod_fd,
            EnteringSysctl(node_fd),
            EnteringSysctl(pod_fd),
            EnteringTun(pod_fd),
        )
        return case(side)
    finally:
        node_kernel.close()
        pod_kernel.close()
        os.close(node_fd)
        os.close(pod_fd)


class EnteringSysctl:
    """The real side's sysctls of one namespace: /proc/sys/net from a thread inside it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, name: str) -> str:
        with entered_fd(self.fd):
            return THREAD.read(name)

    def write(self, name: str, value: str) -> None:
        with entered_fd(self.fd):
            THREAD.write(name, value)


class EnteringTun:
    """The real side's taps: the tap plugin's own /dev/net/tun ioctls, from a thread inside
    the namespace (the kernel puts the device in the namespace of the opener)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __call__(self, name: str, multi_queue: bool) -> None:
        flags = tun.tap_flags(multi_queue, None, None)
        with entered_fd(self.fd):
            tun.create_tap(name, flags)


def outcome(call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """ "ok", or the errno name of the NetlinkError (or sysctl OSError) the call raised."""
    try:
        call(*args, **kwargs)
    except OSError as exc:
        code = exc.errno or 0
        return errno.errorcode.get(code, str(code))
    return "ok"


def answer(call: Callable[..., Any], *args: Any) -> Any:
    """What the call returned, or the errno name of its refusal."""
    try:
        return call(*args)
    except OSError as exc:
        code = exc.errno or 0
        return errno.errorcode.get(code, str(code))


def sysctls(s: Side) -> tuple[Sysctl, Sysctl]:
    assert s.node_sysctl is not None and s.pod_sysctl is not None
    return s.node_sysctl, s.pod_sysctl


def index(k: Kernel, name: str) -> int:
    found = k.find_link(name)
    assert found is not None, name
    return found.index


def links(k: Kernel, other: Kernel | None = None) -> list[tuple[Any, ...]]:
    """Each link as (name, kind, up, promisc, mtu, master's name, alias, peer's name), the
    peer looked up here or in ``other`` (the peer's namespace)."""
    mine = k.links()
    names = {x.index: x.name for x in mine}
    theirs = {x.index: x.name for x in other.links()} if other is not None else {}
    out = []
    for x in mine:
        if x.peer_index and x.peer_netnsid is not None:
            peer = "other:" + theirs.get(x.peer_index, "?")
        else:
            peer = names.get(x.peer_index, "") if x.peer_index else ""
        out.append(
            (
                x.name,
                x.kind,
                bool(x.flags & IFF_UP),
                bool(x.flags & IFF_PROMISC),
                x.mtu,
                names.get(x.master, "") if x.master else "",
                x.alias,
                peer,
            )
        )
    return sorted(out)


def addresses(k: Kernel, family: int = 0) -> list[tuple[str, str, int]]:
    """(link name, address/prefix, scope) of every address but IPv6 link-local ones (made by
    the kernel's autoconfiguration, which the fake does not model)."""
    names = {x.index: x.name for x in k.links()}
    return sorted(
        (names.get(a.index, "?"), str(a.interface), a.scope)
        for a in k.addresses(family=family)
        if not a.interface.ip.is_link_local
    )


def routes(k: Kernel, family: int, table: int) -> list[tuple[Any, ...]]:
    """(dst, link, gateway, proto, scope, type, priority, prefsrc, mtu) of a table's routes but
    the IPv6 link-local and multicast ones."""
    names = {x.index: x.name for x in k.links()}
    out = []
    for r in k.routes(family, table=table):
        if r.dst.is_link_local or r.dst.is_multicast:
            continue
        out.append(
            (
                str(r.dst),
                names.get(r.oif, str(r.oif)),
                str(r.gateway or ""),
                r.proto,
                r.scope,
                r.type,
                r.priority,
                str(r.prefsrc or ""),
                r.mtu,
            )
        )
    return sorted(out)


def rules(k: Kernel, family: int) -> list[tuple[Any, ...]]:
    return sorted(
        (r.priority if r.priority is not None else -1, r.table, str(r.src or ""))
        for r in k.rules(family)
    )


# ------------------------------------------------------------------ the cases


def fresh_namespace(s: Side) -> Any:
    """What a new namespace holds: lo (down), no addresses or routes, the default rules."""
    return {
        "links": links(s.pod),
        "addresses": addresses(s.pod),
        "main4": routes(s.pod, AF_INET, 254),
        "main6": routes(s.pod, AF_INET6, 254),
        "rules4": rules(s.pod, AF_INET),
        "rules6": rules(s.pod, AF_INET6),
        "missing": s.pod.find_link("eth0") is None,
        "by index": outcome(s.pod.link, 4242),
    }


def loopback_up(s: Side) -> Any:
    """Bringing lo up gives it 127.0.0.1/8 and ::1 (the loopback plugin relies on it)."""
    lo = index(s.pod, "lo")
    s.pod.set_link(lo, up=True)
    return {"links": links(s.pod), "addresses": addresses(s.pod), "main4": routes(s.pod, 2, 254)}


def veth_pair(s: Side) -> Any:
    """A veth whose peer is made in the pod; the names already taken on either side."""
    first = outcome(s.node.add_veth, "veth0", "eth0", s.pod_fd, 1400, "02:00:00:00:00:01")
    again = outcome(s.node.add_veth, "veth0", "eth9", s.pod_fd)
    peer_taken = outcome(s.node.add_veth, "veth1", "eth0", s.pod_fd)
    pod_eth0 = s.pod.find_link("eth0")
    return {
        "calls": [first, again, peer_taken],
        "node": links(s.node, s.pod),
        "pod": links(s.pod, s.node),
        "peer mac": pod_eth0.mac if pod_eth0 else None,
        "veth1 left behind": s.node.find_link("veth1") is not None,
    }


def veth_delete_takes_peer(s: Side) -> Any:
    """Deleting one end removes the other, in its own namespace; a second delete is ENODEV."""
    s.node.add_veth("veth0", "eth0", s.pod_fd)
    host = index(s.node, "veth0")
    first = outcome(s.node.delete_link, host)
    second = outcome(s.node.delete_link, host)
    return {"calls": [first, second], "pod": links(s.pod), "node": links(s.node)}


def bad_names(s: Side) -> Any:
    """Names the kernel refuses: too long, a slash, '.', empty peer name is the kernel's pick."""
    return [
        outcome(s.node.add_bridge, "a" * 16),
        outcome(s.node.add_bridge, "a/b"),
        outcome(s.node.add_bridge, "."),
        outcome(s.node.add_bridge, "has space"),
        outcome(s.node.add_bridge, "a" * 15),
        outcome(s.node.add_bridge, "lo"),
    ]


def bridge_ports(s: Side) -> Any:
    """Enslaving: the bridge follows its ports' smallest MTU until one is set on it; the
    kernel's refusals for a missing master, a master that is no bridge, a bridge in itself."""
    s.node.add_bridge("br0")
    s.node.add_veth("vp0", "vq0", s.node_fd, 1400)
    s.node.add_veth("vp1", "vq1", s.node_fd, 9000)
    br, vp0, vp1, vq0 = (index(s.node, n) for n in ("br0", "vp0", "vp1", "vq0"))
    seen = [s.node.link(br).mtu]
    calls = [outcome(s.node.set_link, vp1, master=br)]
    seen.append(s.node.link(br).mtu)
    calls.append(outcome(s.node.set_link, vp0, master=br))
    seen.append(s.node.link(br).mtu)
    calls.append(outcome(s.node.set_link, vp0, master=0))
    seen.append(s.node.link(br).mtu)
    calls.append(outcome(s.node.set_link, vp1, master=0))
    seen.append(s.node.link(br).mtu)
    calls += [
        outcome(s.node.set_link, vp0, master=4242),
        outcome(s.node.set_link, vp0, master=vq0),
        outcome(s.node.set_link, br, master=br),
        outcome(s.node.set_link, index(s.node, "lo"), master=br),
    ]
    s.node.set_link(br, mtu=1300)
    s.node.set_link(vp1, master=br)
    seen.append(s.node.link(br).mtu)
    return {"calls": calls, "bridge mtu": seen, "node": links(s.node)}


def bridge_takes_port_mac(s: Side) -> Any:
    """A bridge without a MAC of its own takes its port's; one set on it stays."""
    s.node.add_bridge("br0")
    s.node.add_veth("vp0", "vq0", s.node_fd, 0, "02:00:00:00:00:07")
    br, vq0 = index(s.node, "br0"), index(s.node, "vq0")
    s.node.set_link(vq0, master=br)
    taken = s.node.link(br).mac
    s.node.set_link(br, mac="02:00:00:00:00:99")
    return [taken, s.node.link(br).mac]


def bridge_delete_releases_ports(s: Side) -> Any:
    s.node.add_bridge("br0")
    s.node.add_veth("vp0", "vq0", s.node_fd)
    s.node.set_link(index(s.node, "vp0"), master=index(s.node, "br0"))
    s.node.delete_link(index(s.node, "br0"))
    return links(s.node)


def set_link_changes(s: Side) -> Any:
    """Each keyword of set_link, and the kernel's refusals."""
    s.node.add_veth("sa", "sb", s.node_fd)
    sa, sb = index(s.node, "sa"), index(s.node, "sb")
    calls = [
        outcome(s.node.set_link, sa, mtu=1300, alias="port", up=True),
        outcome(s.node.set_link, sa, mac="02:aa:bb:cc:dd:ee"),
        outcome(s.node.set_link, sa, flags=IFF_PROMISC, flag_mask=IFF_PROMISC),
        outcome(s.node.set_link, sa, txqlen=77),
        outcome(s.node.set_link, 4242, up=True),
        outcome(s.node.set_link, sa, name="sb"),
        outcome(s.node.set_link, sa, mtu=67),
        outcome(s.node.set_link, sa, mtu=70000),
        outcome(s.node.set_link, sa, mac="01:00:5e:00:00:01"),
        outcome(s.node.set_link, sa, mac="00:00:00:00:00:00"),
    ]
    after = s.node.link(sa)
    view = (after.mtu, after.alias, after.mac, after.txqlen, after.promiscuity > 0, after.up)
    calls.append(outcome(s.node.set_link, sa, alias=""))
    calls.append(outcome(s.node.set_link, sb, name="renamed"))
    calls.append(outcome(s.node.set_link, sa, name="sa2"))
    return {"calls": calls, "sa": view, "node": links(s.node)}


def move_to_pod(s: Side) -> Any:
    """A link moved into the pod arrives down, without its addresses or master, renamed when
    asked; lo and a bridge cannot move; a name taken in the target is EEXIST."""
    s.node.add_bridge("br0")
    s.node.add_veth("mv0", "mv1", s.node_fd)
    s.node.add_veth("mv2", "mv3", s.node_fd)
    mv0, mv2 = index(s.node, "mv0"), index(s.node, "mv2")
    s.node.set_link(mv0, master=index(s.node, "br0"), up=True)
    s.node.add_address(mv0, IFACE("10.9.0.1/24"))
    calls = [
        outcome(s.node.set_link, mv0, netns_fd=s.pod_fd, name="eth0"),
        outcome(s.node.set_link, mv2, netns_fd=s.pod_fd, name="eth0"),
        outcome(s.node.set_link, index(s.node, "lo"), netns_fd=s.pod_fd),
        outcome(s.node.set_link, index(s.node, "br0"), netns_fd=s.pod_fd),
    ]
    return {
        "calls": calls,
        "node": links(s.node, s.pod),
        "pod": links(s.pod, s.node),
        "pod addresses": addresses(s.pod),
        "node addresses": addresses(s.node),
    }


def delete_refusals(s: Side) -> Any:
    return [outcome(s.node.delete_link, index(s.node, "lo")), outcome(s.node.delete_link, 4242)]


def address_rules(s: Side) -> Any:
    """Adding, duplicates (IPv4 by address and prefix, IPv6 by address), deleting, missing
    links and addresses; a down link has no prefix route, an up one has, for either family."""
    s.node.add_veth("ad0", "ad1", s.node_fd)
    ad0, ad1 = index(s.node, "ad0"), index(s.node, "ad1")
    calls = [
        outcome(s.node.add_address, ad0, IFACE("10.44.0.1/24")),
        outcome(s.node.add_address, ad0, IFACE("10.44.0.1/24")),
        outcome(s.node.add_address, ad0, IFACE("10.44.0.1/16")),
        outcome(s.node.add_address, ad1, IFACE("10.44.0.1/24")),
        outcome(s.node.add_address, ad0, IFACE("fd44::1/64"), 0x02),
        outcome(s.node.add_address, ad0, IFACE("fd44::1/64"), 0x02),
        outcome(s.node.add_address, ad0, IFACE("fd44::1/80"), 0x02),
        outcome(s.node.add_address, 4242, IFACE("10.45.0.1/24")),
        outcome(s.node.delete_address, ad0, IFACE("10.46.0.1/24")),
        outcome(s.node.delete_address, 4242, IFACE("10.44.0.1/24")),
        outcome(s.node.delete_address, ad0, IFACE("fd46::1/64")),
    ]
    down = {"main4": routes(s.node, AF_INET, 254), "addresses": addresses(s.node)}
    s.node.set_link(ad0, up=True)
    s.node.set_link(ad1, up=True)
    up = {
        "main4": routes(s.node, AF_INET, 254),
        "main6": routes(s.node, AF_INET6, 254),
        "ad0 v4": addresses_of(s.node, ad0, AF_INET),
    }
    calls.append(outcome(s.node.delete_address, ad0, IFACE("10.44.0.1/16")))
    after_delete = routes(s.node, AF_INET, 254)
    return {"calls": calls, "down": down, "up": up, "after delete": after_delete}


def addresses_of(k: Kernel, idx: int, family: int) -> list[str]:
    return sorted(str(a.interface) for a in k.addresses(index=idx, family=family))


def ipv4_routes(s: Side) -> Any:
    """Route adds and their refusals: a down link, an unreachable gateway, a duplicate; other
    tables, replace, delete (ESRCH when gone), and a link going down takes its IPv4 routes."""
    s.node.add_veth("rt0", "rt1", s.node_fd)
    rt0, rt1 = index(s.node, "rt0"), index(s.node, "rt1")
    gw = IP("10.50.0.2")
    calls = [outcome(s.node.add_route, Route(NET("10.61.0.0/16"), oif=rt0, scope=253))]
    s.node.set_link(rt0, up=True)
    s.node.set_link(rt1, up=True)
    s.node.add_address(rt0, IFACE("10.50.0.1/24"))
    calls += [
        outcome(s.node.add_route, Route(NET("10.60.0.0/16"), oif=rt0, gateway=gw, proto=3)),
        outcome(s.node.add_route, Route(NET("10.60.0.0/16"), oif=rt0, gateway=gw, proto=3)),
        outcome(s.node.add_route, Route(NET("10.61.0.0/16"), oif=rt0, scope=253, priority=7)),
        outcome(s.node.add_route, Route(NET("10.62.0.0/16"), oif=rt0, gateway=IP("10.99.0.1"))),
        outcome(
            s.node.add_route, Route(NET("10.63.0.0/16"), oif=rt0, gateway=IP("10.99.0.1"), flags=4)
        ),
        outcome(s.node.add_route, Route(NET("0.0.0.0/0"), oif=rt0, gateway=gw, table=100)),
        outcome(s.node.add_route, Route(NET("10.64.0.0/16"), oif=rt0, mtu=1200)),
        outcome(
            s.node.add_route,
            Route(NET("10.65.0.0/16"), oif=rt0, gateway=gw, prefsrc=IP("10.50.0.1")),
        ),
        outcome(s.node.add_route, Route(NET("10.66.0.0/16"), oif=4242)),
        outcome(s.node.replace_route, Route(NET("10.60.0.0/16"), oif=rt0, gateway=IP("10.50.0.3"))),
        outcome(s.node.replace_route, Route(NET("10.67.0.0/16"), oif=rt0, gateway=gw)),
    ]
    full = routes(s.node, AF_INET, 254)
    other = routes(s.node, AF_INET, 100)
    by_oif = sorted(str(r.dst) for r in s.node.routes(AF_INET, table=254, oif=rt0))
    (chosen,) = s.node.route_to(IP("10.60.1.1"))
    route_to = (str(chosen.dst), chosen.oif == rt0, str(chosen.gateway), chosen.table)
    calls += [
        outcome(s.node.delete_route, Route(NET("10.60.0.0/16"), oif=rt0)),
        outcome(s.node.delete_route, Route(NET("10.60.0.0/16"), oif=rt0)),
        outcome(s.node.delete_route, Route(NET("10.61.0.0/16"), oif=rt0, priority=8)),
        outcome(s.node.delete_route, Route(NET("10.50.0.0/24"), oif=rt0, scope=253)),
        outcome(s.node.delete_route, Route(NET("0.0.0.0/0"), oif=rt0, table=100)),
    ]
    after = routes(s.node, AF_INET, 254)
    s.node.set_link(rt0, up=False)
    return {
        "calls": calls,
        "main": full,
        "table 100": other,
        "by oif": by_oif,
        "route_to": route_to,
        "after deletes": after,
        "after down": routes(s.node, AF_INET, 254),
        "empty table": routes(s.node, AF_INET, 100),
    }


def route_delete_matches(s: Side) -> Any:
    """A delete names what it matches: the protocol (pycni.net.owned_routes relies on it to
    never remove another program's route), the gateway, the link, the table."""
    s.node.add_veth("dm0", "dm1", s.node_fd)
    dm0, dm1 = index(s.node, "dm0"), index(s.node, "dm1")
    for link in (dm0, dm1):
        s.node.set_link(link, up=True)
    s.node.add_address(dm0, IFACE("10.58.0.1/24"))
    gw = IP("10.58.0.2")
    s.node.add_route(Route(NET("10.59.0.0/16"), oif=dm0, gateway=gw, proto=3))
    calls = [
        outcome(s.node.delete_route, Route(NET("10.59.0.0/16"), proto=157)),
        outcome(s.node.delete_route, Route(NET("10.59.0.0/16"), gateway=IP("10.58.0.3"))),
        outcome(s.node.delete_route, Route(NET("10.59.0.0/16"), oif=dm1)),
        outcome(s.node.delete_route, Route(NET("10.59.0.0/16"), table=100)),
        outcome(s.node.delete_route, Route(NET("10.59.0.0/16"), gateway=gw, proto=3)),
    ]
    return {"calls": calls, "main": routes(s.node, AF_INET, 254)}


def link_down_and_up(s: Side) -> Any:
    """A link going down: what stays of its addresses and routes, for both families, and
    what its coming back up restores."""
    s.node.add_veth("ld0", "ld1", s.node_fd)
    ld0, ld1 = index(s.node, "ld0"), index(s.node, "ld1")
    s.node.set_link(ld0, up=True)
    s.node.set_link(ld1, up=True)
    s.node.add_address(ld0, IFACE("10.55.0.1/24"))
    s.node.add_address(ld0, IFACE("fd55::1/64"), 0x02)
    s.node.add_route(Route(NET("10.56.0.0/16"), oif=ld0, priority=7))
    s.node.add_route(Route(NET("fd56::/48"), oif=ld0))

    def view() -> Any:
        return {
            "addresses": addresses(s.node),
            "main4": routes(s.node, AF_INET, 254),
            "main6": routes(s.node, AF_INET6, 254),
        }

    before = view()
    s.node.set_link(ld0, up=False)
    down = view()
    s.node.set_link(ld0, up=True)
    up = view()
    calls = [
        outcome(s.node.add_route, Route(NET("10.57.0.0/16"), oif=ld0, priority=7)),
        outcome(s.node.delete_route, Route(NET("10.57.0.0/16"), oif=ld0)),
    ]
    return {"before": before, "down": down, "up again": up, "calls": calls}


def ipv6_routes(s: Side) -> Any:
    s.node.add_veth("r60", "r61", s.node_fd)
    r60, r61 = index(s.node, "r60"), index(s.node, "r61")
    calls = [outcome(s.node.add_route, Route(NET("fd61::/48"), oif=r60))]
    s.node.set_link(r60, up=True)
    s.node.set_link(r61, up=True)
    s.node.add_address(r60, IFACE("fd50::1/64"), 0x02)
    calls += [
        outcome(s.node.add_route, Route(NET("fd60::/48"), oif=r60, gateway=IP("fd50::2"))),
        outcome(s.node.add_route, Route(NET("fd60::/48"), oif=r60, gateway=IP("fd50::2"))),
        outcome(s.node.add_route, Route(NET("fd61::/48"), oif=r60, priority=10)),
        outcome(s.node.add_route, Route(NET("::/0"), oif=r60, gateway=IP("fd50::2"), table=100)),
        outcome(s.node.delete_route, Route(NET("fd62::/48"), oif=r60)),
    ]
    return {
        "calls": calls,
        "main": routes(s.node, AF_INET6, 254),
        "table 100": routes(s.node, AF_INET6, 100),
    }


def policy_rules(s: Side) -> Any:
    """Rules: added with and without a priority (the kernel picks one below the first non-zero
    rule), duplicates refused, deleting what is not there is ENOENT."""
    added = [
        Rule(AF_INET, 150, NET("10.73.0.5/32"), 1000),
        Rule(AF_INET, 70000, NET("10.73.1.0/24"), 1001),
        Rule(AF_INET6, 152, NET("fd73::/64"), 1003),
    ]
    calls = [outcome(s.node.add_rule, r) for r in added]
    calls.append(outcome(s.node.add_rule, added[0]))
    calls.append(outcome(s.node.add_rule, Rule(AF_INET, 151, NET("10.73.2.0/24"))))
    both = {"v4": rules(s.node, AF_INET), "v6": rules(s.node, AF_INET6)}
    calls.append(outcome(s.node.delete_rule, added[1]))
    calls.append(outcome(s.node.delete_rule, added[1]))
    calls.append(outcome(s.node.delete_rule, Rule(AF_INET, 151, NET("10.73.2.0/24"))))
    return {"calls": calls, "rules": both, "after": rules(s.node, AF_INET)}


def neighbours(s: Side) -> Any:
    s.node.add_veth("nb0", "nb1", s.node_fd)
    nb0 = index(s.node, "nb0")
    calls = [
        outcome(s.node.set_neighbour, nb0, IP("10.72.0.9"), "02:00:00:00:00:09"),
        outcome(s.node.set_neighbour, nb0, IP("10.72.0.9"), "02:00:00:00:00:0a"),
        outcome(s.node.set_neighbour, 4242, IP("10.72.0.9"), "02:00:00:00:00:09"),
    ]
    seen = sorted((str(n.address), n.mac, n.state & 0x80) for n in s.node.neighbours(nb0, AF_INET))
    calls += [
        outcome(s.node.delete_neighbour, nb0, IP("10.72.0.9")),
        outcome(s.node.delete_neighbour, nb0, IP("10.72.0.9")),
    ]
    return {"calls": calls, "seen": seen, "after": len(s.node.neighbours(nb0, AF_INET))}


def vxlan_and_fdb(s: Side) -> Any:
    """Vxlans on an underlay link (a second one with the same VNI and port refused, an MTU
    above what the underlay leaves clamped, one below 68 refused) and forwarding entries of
    one: replaced in place, deleted, a second delete refused."""
    s.node.add_veth("ul0", "ul1", s.node_fd)
    ul0 = index(s.node, "ul0")
    calls = [
        outcome(s.node.add_vxlan, "vx0", 74, IP("10.74.0.1"), ul0, 8472, 1400),
        outcome(s.node.add_vxlan, "vx1", 74, IP("10.74.0.1"), ul0, 8472, 1400),
        outcome(s.node.add_vxlan, "vx2", 75, IP("fd74::1"), ul0, 4789, 1450, True),
        outcome(s.node.add_vxlan, "vx3", 76, IP("10.74.0.1"), ul0, 4789, 9000),
        outcome(s.node.add_vxlan, "vx4", 77, IP("10.74.0.1"), ul0, 4789, 60),
    ]
    made = [s.node.find_link(name) for name in ("vx0", "vx2", "vx3")]
    view = [
        (x.name, x.mtu, x.vxlan.vni, str(x.vxlan.local), x.vxlan.underlay_index == ul0,
         x.vxlan.port, x.vxlan.learning)
        for x in made if x is not None and x.vxlan is not None
    ]  # fmt: skip
    vx0 = index(s.node, "vx0")
    mac = "02:00:00:00:00:74"
    calls += [
        outcome(s.node.set_fdb, vx0, mac, IP("10.74.0.2")),
        outcome(s.node.set_fdb, vx0, mac, IP("10.74.0.3")),
        outcome(s.node.set_fdb, vx0, "02:00:00:00:00:75", IP("10.74.0.5")),
    ]
    seen = sorted((e.mac, str(e.remote)) for e in s.node.fdb_entries(vx0))
    calls += [
        outcome(s.node.delete_fdb, vx0, mac, IP("10.74.0.3")),
        outcome(s.node.delete_fdb, vx0, mac, IP("10.74.0.3")),
        outcome(s.node.delete_fdb, 4242, mac, IP("10.74.0.3")),
    ]
    after = [(e.mac, str(e.remote)) for e in s.node.fdb_entries(vx0)]
    return {"calls": calls, "vxlans": view, "fdb": seen, "after": after}


def netns_ids(s: Side) -> Any:
    """The id a namespace gives another: none until a link between them is made and listed
    (the kernel gives one when it reports the link's peer namespace), then the same both ways."""
    before = answer(s.node.netns_id, s.pod_fd)
    s.node.add_veth("ni0", "eth0", s.pod_fd)
    pairs = (links(s.node, s.pod), links(s.pod, s.node))
    return {
        "before": before,
        "node's id of the pod": answer(s.node.netns_id, s.pod_fd),
        "pod's id of the node": answer(s.pod.netns_id, s.node_fd),
        "peers": [[x[-1] for x in side if x[1] == "veth"] for side in pairs],
    }


def macvlan_in_pod(s: Side) -> Any:
    """A macvlan made in the pod of a node link; its master gone, it goes too."""
    s.node.add_veth("up0", "up1", s.node_fd)
    up0 = index(s.node, "up0")
    calls = [
        outcome(s.node.add_macvlan, "mv0", up0, 4, s.pod_fd, 1400, "02:00:00:00:00:44"),
        outcome(s.node.add_macvlan, "mv0", up0, 4, s.pod_fd),
        outcome(s.node.add_macvlan, "mv1", 4242, 4, s.pod_fd),
        outcome(s.node.add_macvlan, "mv1", index(s.node, "lo"), 4, s.pod_fd),
        outcome(s.node.add_macvlan, "mv1", up0, 4, s.pod_fd, 9000),
    ]
    made = s.pod.find_link("mv0")
    view = (made.mac, made.macvlan_mode, made.mtu) if made else None
    pod = links(s.pod, s.node)
    s.node.delete_link(up0)
    return {"calls": calls, "mv0": view, "pod": pod, "after": links(s.pod)}


def ipv4_conf_and_forwarding(s: Side) -> Any:
    """Per-link IPv4 settings; the forwarding switch reads as 0 or 1 (a new namespace copies
    IPv4's from the machine's own, net.core.devconf_inherit_init_net, so no value is fixed)."""
    s.node.add_veth("cf0", "cf1", s.node_fd)
    return [
        s.pod.forwarding(AF_INET) in (0, 1),
        s.pod.forwarding(AF_INET6) in (0, 1),
        outcome(s.node.set_ipv4_conf, index(s.node, "cf0"), {IPV4_DEVCONF_ARP_NOTIFY: 1}),
        outcome(s.node.set_ipv4_conf, 4242, {IPV4_DEVCONF_ARP_NOTIFY: 1}),
    ]


def bridge_port_flags(s: Side) -> Any:
    s.node.add_bridge("br0")
    s.node.add_veth("bp0", "bp1", s.node_fd)
    bp0 = index(s.node, "bp0")
    before = outcome(s.node.set_bridge_port, bp0, True, True)
    s.node.set_link(bp0, master=index(s.node, "br0"))
    return [before, outcome(s.node.set_bridge_port, bp0, True, True)]


IPV6_KNOBS = (
    "accept_ra",
    "accept_dad",
    "autoconf",
    "disable_ipv6",
    "enhanced_dad",
    "keep_addr_on_down",
    "ndisc_notify",
)


def sysctl_per_link(s: Side) -> Any:
    """A link's per-device entries: their defaults, a write read back, the same IPv4 state
    over netlink and /proc, refusals (no such device, not a number)."""
    node_sysctl, _ = sysctls(s)
    s.node.add_veth("sc0", "sc1", s.node_fd)
    sc0 = index(s.node, "sc0")
    defaults = {k: node_sysctl.read(f"net/ipv6/conf/sc0/{k}") for k in IPV6_KNOBS}
    lo = {k: node_sysctl.read(f"net/ipv6/conf/lo/{k}") for k in ("accept_dad", "disable_ipv6")}
    before = node_sysctl.read("net/ipv4/conf/sc0/arp_notify")
    s.node.set_ipv4_conf(sc0, {IPV4_DEVCONF_ARP_NOTIFY: 1})
    calls = [
        outcome(node_sysctl.write, "net/ipv6/conf/sc0/accept_ra", "0"),
        outcome(node_sysctl.write, "net/ipv4/conf/sc0/route_localnet", "1"),
        outcome(node_sysctl.write, "net/ipv6/conf/nosuch0/accept_ra", "0"),
        answer(node_sysctl.read, "net/ipv4/conf/nosuch0/arp_notify"),
        outcome(node_sysctl.write, "net/ipv6/conf/sc0/accept_ra", "yes"),
    ]
    after = [
        node_sysctl.read("net/ipv4/conf/sc0/arp_notify"),
        node_sysctl.read("net/ipv4/conf/sc0/route_localnet"),
        node_sysctl.read("net/ipv6/conf/sc0/accept_ra"),
        node_sysctl.read("net/ipv6/conf/sc1/accept_ra"),
    ]
    s.node.delete_link(sc0)
    gone = answer(node_sysctl.read, "net/ipv6/conf/sc0/accept_ra")
    return {
        "defaults": defaults,
        "lo": lo,
        "arp_notify": before,
        "calls": calls,
        "after": after,
        "gone": gone,
    }


def sysctl_forwarding(s: Side) -> Any:
    """The forwarding switches: a /proc write is what RTM_GETNETCONF reads (IPv4's starting
    value is the machine's own, so only its range is fixed)."""
    _, pod_sysctl = sysctls(s)
    start = [pod_sysctl.read("net/ipv4/ip_forward") in ("0", "1")]
    start.append(pod_sysctl.read("net/ipv6/conf/all/forwarding"))
    pod_sysctl.write("net/ipv4/ip_forward", "1")
    pod_sysctl.write("net/ipv6/conf/all/forwarding", "1")
    on = [s.pod.forwarding(AF_INET), s.pod.forwarding(AF_INET6)]
    pod_sysctl.write("net/ipv4/ip_forward", "0")
    return {
        "start": start,
        "on": on,
        "off": [pod_sysctl.read("net/ipv4/ip_forward"), s.pod.forwarding(AF_INET)],
    }


def sysctl_disable_ipv6(s: Side) -> Any:
    """disable_ipv6=1 takes a link's IPv6 addresses and routes and refuses new ones; IPv4
    stays."""
    node_sysctl, _ = sysctls(s)
    s.node.add_veth("d60", "d61", s.node_fd)
    d60, d61 = index(s.node, "d60"), index(s.node, "d61")
    s.node.set_link(d60, up=True)
    s.node.set_link(d61, up=True)
    s.node.add_address(d60, IFACE("10.66.0.1/24"))
    s.node.add_address(d60, IFACE("fd66::1/64"), 0x02)
    before = addresses(s.node)
    node_sysctl.write("net/ipv6/conf/d60/disable_ipv6", "1")
    return {
        "before": before,
        "after": addresses(s.node),
        "main6": routes(s.node, AF_INET6, 254),
        "add": outcome(s.node.add_address, d60, IFACE("fd66::2/64"), 0x02),
        "add4": outcome(s.node.add_address, d60, IFACE("10.66.0.2/24")),
    }


def sysctl_keep_addr_on_down(s: Side) -> Any:
    """keep_addr_on_down=1: a link going down keeps its IPv6 addresses (0, the default, drops
    them: link_down_and_up)."""
    node_sysctl, _ = sysctls(s)
    s.node.add_veth("k60", "k61", s.node_fd)
    k60, k61 = index(s.node, "k60"), index(s.node, "k61")
    node_sysctl.write("net/ipv6/conf/k60/keep_addr_on_down", "1")
    s.node.set_link(k60, up=True)
    s.node.set_link(k61, up=True)
    s.node.add_address(k60, IFACE("fd67::1/64"), 0x02)
    s.node.set_link(k60, up=False)
    down = addresses(s.node)
    s.node.set_link(k60, up=True)
    return {"down": down, "up again": addresses(s.node), "main6": routes(s.node, AF_INET6, 254)}


def sysctl_after_move(s: Side) -> Any:
    """A link that changes namespace starts again from the defaults there."""
    node_sysctl, pod_sysctl = sysctls(s)
    s.node.add_veth("mv60", "mv61", s.node_fd)
    node_sysctl.write("net/ipv6/conf/mv60/accept_ra", "0")
    node_sysctl.write("net/ipv4/conf/mv60/route_localnet", "1")
    s.node.set_link(index(s.node, "mv60"), netns_fd=s.pod_fd)
    return [
        pod_sysctl.read("net/ipv6/conf/mv60/accept_ra"),
        pod_sysctl.read("net/ipv4/conf/mv60/route_localnet"),
        answer(node_sysctl.read, "net/ipv6/conf/mv60/accept_ra"),
    ]


def unicast(k: Kernel, family: int, table: int) -> list[tuple[Any, ...]]:
    """A table's unicast routes (a VRF's table also holds its ports' local and broadcast
    routes, which the fake does not model)."""
    return [r for r in routes(k, family, table) if r[5] == 1]


def vrf_ports(s: Side) -> Any:
    """Enslaving an up link to a VRF cycles it: its routes leave the main table and its
    connected route comes back in the VRF's; a gateway there is reachable for routes of either
    table; release, and deleting the VRF, cycle it back. IPv4 only: a VRF's IPv6 local routes
    are not modelled."""
    s.pod.add_veth("vr0", "vr1", s.pod_fd)
    vr0, vr1 = index(s.pod, "vr0"), index(s.pod, "vr1")
    s.pod.set_link(vr0, up=True)
    s.pod.set_link(vr1, up=True)
    s.pod.add_address(vr0, IFACE("10.77.0.5/24"))
    s.pod.add_route(Route(NET("10.78.0.0/16"), oif=vr0, gateway=IP("10.77.0.1")))
    s.pod.add_vrf("vrf7", 7)
    vrf = index(s.pod, "vrf7")

    def view() -> Any:
        names = {x.index: x.name for x in s.pod.links()}
        return {
            "main": unicast(s.pod, AF_INET, 254),
            "t7": unicast(s.pod, AF_INET, 7),
            "masters": sorted((x.name, names.get(x.master, "")) for x in s.pod.links() if x.master),
        }

    rules4 = rules(s.pod, AF_INET)
    calls = [outcome(s.pod.set_link, vr1, master=vrf)]  # a down VRF takes ports too
    s.pod.set_link(vrf, up=True)
    calls.append(outcome(s.pod.set_link, vr0, master=vrf))
    enslaved = {**view(), "links": links(s.pod), "addresses": addresses(s.pod, AF_INET)}
    via = IP("10.77.0.1")
    calls += [
        outcome(s.pod.add_route, Route(NET("10.78.0.0/16"), oif=vr0, gateway=via, table=7)),
        outcome(s.pod.add_route, Route(NET("10.79.0.0/16"), oif=vr0, gateway=via)),
        outcome(s.pod.add_route, Route(NET("10.80.0.0/16"), oif=vr1, gateway=via, table=7)),
    ]
    with_routes = view()
    s.pod.set_link(vr0, master=0)
    released = view()
    s.pod.set_link(vr0, master=vrf)
    calls.append(outcome(s.pod.set_link, vr0, master=index(s.pod, "lo")))  # leaves, then fails
    refused = view()
    s.pod.set_link(vr0, master=vrf)
    s.pod.delete_link(vrf)
    return {
        "rules": rules4,
        "calls": calls,
        "enslaved": enslaved,
        "with routes": with_routes,
        "released": released,
        "refused": refused,
        "vrf gone": {**view(), "addresses": addresses(s.pod, AF_INET)},
    }


def tap_device(s: Side) -> Any:
    """A tap as the tap plugin makes it (TUNSETIFF, TUNSETPERSIST): down, MTU 1500, a locally
    administered MAC, no carrier once up; a taken name attaches to a tap of the same queue
    mode and is refused otherwise; then configured as the plugin does (MTU, bridge port)."""
    assert s.pod_tap is not None
    s.pod.add_veth("tv0", "tv1", s.pod_fd)
    calls = [
        outcome(s.pod_tap, "tp0", False),
        outcome(s.pod_tap, "tp0", False),  # attached to, not made again
        outcome(s.pod_tap, "tp0", True),
        outcome(s.pod_tap, "tq0", True),
        outcome(s.pod_tap, "tq0", False),
        outcome(s.pod_tap, "tv0", False),
    ]
    made = s.pod.link(index(s.pod, "tp0"))
    fresh = (made.flags, made.oper_state, made.mtu, made.txqlen, int(made.mac[:2], 16) & 3)
    s.pod.set_link(made.index, up=True)
    up = s.pod.link(made.index)
    mtus = [outcome(s.pod.set_link, made.index, mtu=m) for m in (65522, 67, 68, 65521, 1400)]
    s.pod.add_bridge("br0")
    br0 = index(s.pod, "br0")
    s.pod.set_link(made.index, master=br0)
    bridge = s.pod.link(br0)
    links_after = links(s.pod)
    gone = [outcome(s.pod.delete_link, made.index), outcome(s.pod.delete_link, made.index)]
    return {
        "calls": calls,
        "fresh": fresh,
        "up": (up.flags, up.oper_state),
        "mtus": mtus,
        "bridge": (bridge.mac == made.mac, bridge.mtu),
        "links": links_after,
        "deleted": gone,
        "after": [x[0] for x in links(s.pod)],
    }


# cases that need the vrf module: the kernel suite cannot run them on this machine's kernel,
# the full-kernel lane does (tests/fullkernel/test_fake_kernel_vrf_contract.py)
VRF_CASES: dict[str, Callable[[Side], Any]] = {f.__name__: f for f in (vrf_ports,)}
VRF_EXPECTED: dict[str, Any] = {
    "vrf_ports": {
        "calls": ["ok", "ok", "ok", "ok", "ENETUNREACH", "ENOTSUP"],
        "enslaved": {
            "addresses": [("lo", "127.0.0.1/8", 254), ("vr0", "10.77.0.5/24", 0)],
            "links": [
                ("lo", "", True, False, 65536, "", "", ""),
                ("vr0", "veth", True, False, 1500, "vrf7", "", "vr1"),
                ("vr1", "veth", True, False, 1500, "vrf7", "", "vr0"),
                ("vrf7", "vrf", True, False, 65575, "", "", ""),
            ],
            "main": [],
            "masters": [("vr0", "vrf7"), ("vr1", "vrf7")],
            "t7": [("10.77.0.0/24", "vr0", "", 2, 253, 1, None, "10.77.0.5", 0)],
        },
        "refused": {
            "main": [("10.77.0.0/24", "vr0", "", 2, 253, 1, None, "10.77.0.5", 0)],
            "masters": [("vr1", "vrf7")],
            "t7": [],
        },
        "released": {
            "main": [("10.77.0.0/24", "vr0", "", 2, 253, 1, None, "10.77.0.5", 0)],
            "masters": [("vr1", "vrf7")],
            "t7": [],
        },
        "rules": [(-1, 255, ""), (1000, 0, ""), (32766, 254, ""), (32767, 253, "")],
        "vrf gone": {
            "addresses": [("lo", "127.0.0.1/8", 254), ("vr0", "10.77.0.5/24", 0)],
            "main": [("10.77.0.0/24", "vr0", "", 2, 253, 1, None, "10.77.0.5", 0)],
            "masters": [],
            "t7": [],
        },
        "with routes": {
            "main": [("10.79.0.0/16", "vr0", "10.77.0.1", 4, 0, 1, None, "", 0)],
            "masters": [("vr0", "vrf7"), ("vr1", "vrf7")],
            "t7": [
                ("10.77.0.0/24", "vr0", "", 2, 253, 1, None, "10.77.0.5", 0),
                ("10.78.0.0/16", "vr0", "10.77.0.1", 4, 0, 1, None, "", 0),
            ],
        },
    }
}


CASES: dict[str, Callable[[Side], Any]] = {
    f.__name__: f
    for f in (
        fresh_namespace,
        loopback_up,
        veth_pair,
        veth_delete_takes_peer,
        bad_names,
        bridge_ports,
        bridge_takes_port_mac,
        bridge_delete_releases_ports,
        set_link_changes,
        move_to_pod,
        delete_refusals,
        address_rules,
        ipv4_routes,
        route_delete_matches,
        link_down_and_up,
        ipv6_routes,
        policy_rules,
        neighbours,
        vxlan_and_fdb,
        netns_ids,
        macvlan_in_pod,
        ipv4_conf_and_forwarding,
        bridge_port_flags,
        sysctl_per_link,
        sysctl_forwarding,
        sysctl_disable_ipv6,
        sysctl_keep_addr_on_down,
        sysctl_after_move,
        tap_device,
    )
}

EXPECTED: dict[str, Any] = {
    "fresh_namespace": {
        "links": [("lo", "", True, False, 65536, "", "", "")],
        "addresses": [("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)],
        "main4": [],
        "main6": [],
        "rules4": [(-1, 255, ""), (32766, 254, ""), (32767, 253, "")],
        "rules6": [(-1, 255, ""), (32766, 254, "")],
        "missing": True,
        "by index": "ENODEV",
    },
    "loopback_up": {
        "links": [("lo", "", True, False, 65536, "", "", "")],
        "addresses": [("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)],
        "main4": [],
    },
    "veth_pair": {
        "calls": ["ok", "EEXIST", "EEXIST"],
        "node": [
            ("lo", "", True, False, 65536, "", "", ""),
            ("veth0", "veth", False, False, 1400, "", "", "other:eth0"),
        ],
        "pod": [
            ("eth0", "veth", False, False, 1400, "", "", "other:veth0"),
            ("lo", "", True, False, 65536, "", "", ""),
        ],
        "peer mac": "02:00:00:00:00:01",
        "veth1 left behind": False,
    },
    "veth_delete_takes_peer": {
        "calls": ["ok", "ENODEV"],
        "pod": [("lo", "", True, False, 65536, "", "", "")],
        "node": [("lo", "", True, False, 65536, "", "", "")],
    },
    "bad_names": ["ERANGE", "EINVAL", "EINVAL", "EINVAL", "ok", "EEXIST"],
    "bridge_ports": {
        "calls": ["ok", "ok", "ok", "ok", "EINVAL", "ENOTSUP", "EINVAL", "EINVAL"],
        "bridge mtu": [1500, 9000, 1400, 9000, 1500, 1300],
        "node": [
            ("br0", "bridge", False, False, 1300, "", "", ""),
            ("lo", "", True, False, 65536, "", "", ""),
            ("vp0", "veth", False, False, 1400, "", "", "vq0"),
            ("vp1", "veth", False, False, 9000, "br0", "", "vq1"),
            ("vq0", "veth", False, False, 1400, "", "", "vp0"),
            ("vq1", "veth", False, False, 9000, "", "", "vp1"),
        ],
    },
    "bridge_takes_port_mac": ["02:00:00:00:00:07", "02:00:00:00:00:99"],
    "bridge_delete_releases_ports": [
        ("lo", "", True, False, 65536, "", "", ""),
        ("vp0", "veth", False, False, 1500, "", "", "vq0"),
        ("vq0", "veth", False, False, 1500, "", "", "vp0"),
    ],
    "set_link_changes": {
        "calls": [
            "ok",
            "ok",
            "ok",
            "ok",
            "ENODEV",
            "EEXIST",
            "EINVAL",
            "EINVAL",
            "EADDRNOTAVAIL",
            "EADDRNOTAVAIL",
            "ok",
            "ok",
            "ok",
        ],
        "sa": (1300, "port", "02:aa:bb:cc:dd:ee", 77, True, True),
        "node": [
            ("lo", "", True, False, 65536, "", "", ""),
            ("renamed", "veth", False, False, 1500, "", "", "sa2"),
            ("sa2", "veth", True, True, 1300, "", "", "renamed"),
        ],
    },
    "move_to_pod": {
        "calls": ["ok", "EEXIST", "EINVAL", "EINVAL"],
        "node": [
            ("br0", "bridge", False, False, 1500, "", "", ""),
            ("lo", "", True, False, 65536, "", "", ""),
            ("mv1", "veth", False, False, 1500, "", "", "other:eth0"),
            ("mv3", "veth", False, False, 1500, "", "", "other:mv2"),
        ],
        "pod": [
            ("eth0", "veth", False, False, 1500, "", "", "other:mv1"),
            ("lo", "", True, False, 65536, "", "", ""),
            ("mv2", "veth", False, False, 1500, "", "", "other:mv3"),
        ],
        "pod addresses": [("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)],
        "node addresses": [("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)],
    },
    "delete_refusals": ["ENOTSUP", "ENODEV"],
    "address_rules": {
        "calls": [
            "ok",
            "EEXIST",
            "ok",
            "ok",
            "ok",
            "EEXIST",
            "EEXIST",
            "ENODEV",
            "EADDRNOTAVAIL",
            "ENODEV",
            "EADDRNOTAVAIL",
            "ok",
        ],
        "down": {
            "main4": [],
            "addresses": [
                ("ad0", "10.44.0.1/16", 0),
                ("ad0", "10.44.0.1/24", 0),
                ("ad0", "fd44::1/64", 0),
                ("ad1", "10.44.0.1/24", 0),
                ("lo", "127.0.0.1/8", 254),
                ("lo", "::1/128", 254),
            ],
        },
        "up": {
            "main4": [
                ("10.44.0.0/16", "ad0", "", 2, 253, 1, None, "10.44.0.1", 0),
                ("10.44.0.0/24", "ad0", "", 2, 253, 1, None, "10.44.0.1", 0),
                ("10.44.0.0/24", "ad1", "", 2, 253, 1, None, "10.44.0.1", 0),
            ],
            "main6": [("fd44::/64", "ad0", "", 2, 0, 1, 256, "", 0)],
            "ad0 v4": ["10.44.0.1/16", "10.44.0.1/24"],
        },
        "after delete": [
            ("10.44.0.0/24", "ad0", "", 2, 253, 1, None, "10.44.0.1", 0),
            ("10.44.0.0/24", "ad1", "", 2, 253, 1, None, "10.44.0.1", 0),
        ],
    },
    "ipv4_routes": {
        "calls": [
            "ENETDOWN",
            "ok",
            "EEXIST",
            "ok",
            "ENETUNREACH",
            "ok",
            "ok",
            "ok",
            "ok",
            "ENODEV",
            "ok",
            "ok",
            "ok",
            "ESRCH",
            "ESRCH",
            "ok",
            "ok",
        ],
        "main": [
            ("10.50.0.0/24", "rt0", "", 2, 253, 1, None, "10.50.0.1", 0),
            ("10.60.0.0/16", "rt0", "10.50.0.3", 4, 0, 1, None, "", 0),
            ("10.61.0.0/16", "rt0", "", 4, 253, 1, 7, "", 0),
            ("10.63.0.0/16", "rt0", "10.99.0.1", 4, 0, 1, None, "", 0),
            ("10.64.0.0/16", "rt0", "", 4, 0, 1, None, "", 1200),
            ("10.65.0.0/16", "rt0", "10.50.0.2", 4, 0, 1, None, "10.50.0.1", 0),
            ("10.67.0.0/16", "rt0", "10.50.0.2", 4, 0, 1, None, "", 0),
        ],
        "table 100": [("0.0.0.0/0", "rt0", "10.50.0.2", 4, 0, 1, None, "", 0)],
        "by oif": [
            "10.50.0.0/24",
            "10.60.0.0/16",
            "10.61.0.0/16",
            "10.63.0.0/16",
            "10.64.0.0/16",
            "10.65.0.0/16",
            "10.67.0.0/16",
        ],
        "route_to": ("10.60.1.1/32", True, "10.50.0.3", 254),
        "after deletes": [
            ("10.61.0.0/16", "rt0", "", 4, 253, 1, 7, "", 0),
            ("10.63.0.0/16", "rt0", "10.99.0.1", 4, 0, 1, None, "", 0),
            ("10.64.0.0/16", "rt0", "", 4, 0, 1, None, "", 1200),
            ("10.65.0.0/16", "rt0", "10.50.0.2", 4, 0, 1, None, "10.50.0.1", 0),
            ("10.67.0.0/16", "rt0", "10.50.0.2", 4, 0, 1, None, "", 0),
        ],
        "after down": [],
        "empty table": [],
    },
    "route_delete_matches": {
        "calls": ["ESRCH", "ESRCH", "ESRCH", "ESRCH", "ok"],
        "main": [("10.58.0.0/24", "dm0", "", 2, 253, 1, None, "10.58.0.1", 0)],
    },
    "link_down_and_up": {
        "before": {
            "addresses": [
                ("ld0", "10.55.0.1/24", 0),
                ("ld0", "fd55::1/64", 0),
                ("lo", "127.0.0.1/8", 254),
                ("lo", "::1/128", 254),
            ],
            "main4": [
                ("10.55.0.0/24", "ld0", "", 2, 253, 1, None, "10.55.0.1", 0),
                ("10.56.0.0/16", "ld0", "", 4, 0, 1, 7, "", 0),
            ],
            "main6": [
                ("fd55::/64", "ld0", "", 2, 0, 1, 256, "", 0),
                ("fd56::/48", "ld0", "", 4, 0, 1, 1024, "", 0),
            ],
        },
        "down": {
            "addresses": [
                ("ld0", "10.55.0.1/24", 0),
                ("lo", "127.0.0.1/8", 254),
                ("lo", "::1/128", 254),
            ],
            "main4": [],
            "main6": [],
        },
        "up again": {
            "addresses": [
                ("ld0", "10.55.0.1/24", 0),
                ("lo", "127.0.0.1/8", 254),
                ("lo", "::1/128", 254),
            ],
            "main4": [("10.55.0.0/24", "ld0", "", 2, 253, 1, None, "10.55.0.1", 0)],
            "main6": [],
        },
        "calls": ["ok", "ok"],
    },
    "ipv6_routes": {
        "calls": ["ENETDOWN", "ok", "EEXIST", "ok", "ok", "ESRCH"],
        "main": [
            ("fd50::/64", "r60", "", 2, 0, 1, 256, "", 0),
            ("fd60::/48", "r60", "fd50::2", 4, 0, 1, 1024, "", 0),
            ("fd61::/48", "r60", "", 4, 0, 1, 10, "", 0),
        ],
        "table 100": [("::/0", "r60", "fd50::2", 4, 0, 1, 1024, "", 0)],
    },
    "policy_rules": {
        "calls": ["ok", "ok", "ok", "EEXIST", "ok", "ok", "ENOENT", "ok"],
        "rules": {
            "v4": [
                (-1, 255, ""),
                (999, 151, "10.73.2.0/24"),
                (1000, 150, "10.73.0.5/32"),
                (1001, 70000, "10.73.1.0/24"),
                (32766, 254, ""),
                (32767, 253, ""),
            ],
            "v6": [(-1, 255, ""), (1003, 152, "fd73::/64"), (32766, 254, "")],
        },
        "after": [(-1, 255, ""), (1000, 150, "10.73.0.5/32"), (32766, 254, ""), (32767, 253, "")],
    },
    "neighbours": {
        "calls": ["ok", "ok", "ENODEV", "ok", "ENOENT"],
        "seen": [("10.72.0.9", "02:00:00:00:00:0a", 128)],
        "after": 0,
    },
    "vxlan_and_fdb": {
        "calls": ["ok", "EEXIST", "ok", "ok", "EINVAL", "ok", "ok", "ok", "ok", "ENOENT", "ENODEV"],
        "vxlans": [
            ("vx0", 1400, 74, "10.74.0.1", True, 8472, False),
            ("vx2", 1430, 75, "fd74::1", True, 4789, True),  # 1450 asked: IPv6 headroom is 70
            ("vx3", 1450, 76, "10.74.0.1", True, 4789, False),  # 9000 asked
        ],
        "fdb": [("02:00:00:00:00:74", "10.74.0.3"), ("02:00:00:00:00:75", "10.74.0.5")],
        "after": [("02:00:00:00:00:75", "10.74.0.5")],
    },
    "netns_ids": {
        "before": None,
        "node's id of the pod": 0,
        "pod's id of the node": 0,
        "peers": [["other:eth0"], ["other:ni0"]],
    },
    "macvlan_in_pod": {
        "calls": ["ok", "EEXIST", "ENODEV", "EINVAL", "EINVAL"],
        "mv0": ("02:00:00:00:00:44", 4, 1400),
        "pod": [
            ("lo", "", True, False, 65536, "", "", ""),
            ("mv0", "macvlan", False, False, 1400, "", "", "other:up0"),
        ],
        "after": [("lo", "", True, False, 65536, "", "", "")],
    },
    "ipv4_conf_and_forwarding": [True, True, "ok", "ENODEV"],
    "bridge_port_flags": ["ENOTSUP", "ok"],
    "sysctl_per_link": {
        "defaults": {
            "accept_ra": "1",
            "accept_dad": "1",
            "autoconf": "1",
            "disable_ipv6": "0",
            "enhanced_dad": "1",
            "keep_addr_on_down": "0",
            "ndisc_notify": "0",
        },
        "lo": {"accept_dad": "-1", "disable_ipv6": "0"},
        "arp_notify": "0",
        "calls": ["ok", "ok", "ENOENT", "ENOENT", "EINVAL"],
        "after": ["1", "1", "0", "1"],
        "gone": "ENOENT",
    },
    "sysctl_forwarding": {"start": [True, "0"], "on": [1, 1], "off": ["0", 0]},
    "sysctl_disable_ipv6": {
        "before": [
            ("d60", "10.66.0.1/24", 0),
            ("d60", "fd66::1/64", 0),
            ("lo", "127.0.0.1/8", 254),
            ("lo", "::1/128", 254),
        ],
        "after": [("d60", "10.66.0.1/24", 0), ("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)],
        "main6": [],
        "add": "EACCES",
        "add4": "ok",
    },
    "sysctl_keep_addr_on_down": {
        "down": [("k60", "fd67::1/64", 0), ("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)],
        "up again": [
            ("k60", "fd67::1/64", 0),
            ("lo", "127.0.0.1/8", 254),
            ("lo", "::1/128", 254),
        ],
        "main6": [("fd67::/64", "k60", "", 2, 0, 1, 256, "", 0)],
    },
    "sysctl_after_move": ["1", "0", "ENOENT"],
    "tap_device": {
        "calls": ["ok", "ok", "EINVAL", "ok", "EINVAL", "EINVAL"],
        "fresh": (4098, "down", 1500, 1000, 2),
        "up": (4099, "down"),
        "mtus": ["EINVAL", "EINVAL", "ok", "ok", "ok"],  # 65521: 65535 less the Ethernet header
        "bridge": (True, 1400),
        "links": [
            ("br0", "bridge", False, False, 1400, "", "", ""),
            ("lo", "", True, False, 65536, "", "", ""),
            ("tp0", "tun", True, False, 1400, "br0", "", ""),
            ("tq0", "tun", False, False, 1500, "", "", ""),
            ("tv0", "veth", False, False, 1500, "", "", "tv1"),
            ("tv1", "veth", False, False, 1500, "", "", "tv0"),
        ],
        "deleted": ["ok", "ENODEV"],
        "after": ["br0", "lo", "tq0", "tv0", "tv1"],
    },
}
