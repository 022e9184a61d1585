"""The pyroute2 adapter's translations, on hand-made message objects (no kernel, no socket).

pyroute2's messages answer ``msg["field"]`` and ``msg.get_attr("NAME")``; these fakes do the
same, so the tests pin what each dataclass field is read from and which keywords a request
hands pyroute2.
"""

from __future__ import annotations

import errno
import ipaddress

import pytest

from pycni.net.netlink import kernel as k
from pycni.net.netlink.rtnl import pyroute2_adapter as a

IP = ipaddress.ip_address
NET = ipaddress.ip_network


class Msg:
    def __init__(self, fields: dict[str, object], attrs: dict[str, object]) -> None:
        self.fields = fields
        self.attrs = attrs

    def __getitem__(self, key: str) -> object:
        return self.fields[key]

    def get_attr(self, name: str) -> object:
        return self.attrs.get(name)


def test_link_of_reads_every_field() -> None:
    data = Msg({}, {"IFLA_VXLAN_ID": 7, "IFLA_VXLAN_LOCAL6": "fd00::7", "IFLA_VXLAN_PORT": 8472})
    info = Msg({}, {"IFLA_INFO_KIND": "vxlan", "IFLA_INFO_DATA": data})
    msg = Msg(
        {"index": 4, "flags": 0x1003},
        {
            "IFLA_IFNAME": "vx0",
            "IFLA_ADDRESS": "02:00:00:00:00:04",
            "IFLA_MTU": 1450,
            "IFLA_MASTER": 2,
            "IFLA_LINK": 3,
            "IFLA_LINK_NETNSID": 0,
            "IFLA_OPERSTATE": "UP",
            "IFLA_IFALIAS": "x",
            "IFLA_TXQLEN": 1000,
            "IFLA_PROMISCUITY": 1,
            "IFLA_LINKINFO": info,
        },
    )
    assert a.link_of(msg) == k.Link(
        index=4,
        name="vx0",
        flags=0x1003,
        mac="02:00:00:00:00:04",
        mtu=1450,
        master=2,
        peer_index=3,
        peer_netnsid=0,
        kind="vxlan",
        oper_state="up",
        alias="x",
        txqlen=1000,
        promiscuity=1,
        vxlan=k.VxlanInfo(vni=7, local=IP("fd00::7"), port=8472),
    )


def test_macvlan_mode_by_name_or_number() -> None:
    for raw in ("passthru", 8):
        info = Msg(
            {}, {"IFLA_INFO_KIND": "macvlan", "IFLA_INFO_DATA": Msg({}, {"IFLA_MACVLAN_MODE": raw})}
        )
        link = a.link_of(Msg({"index": 1, "flags": 0}, {"IFLA_LINKINFO": info}))
        assert link.macvlan_mode == 8 and link.kind == "macvlan"


def test_address_route_and_rule_of() -> None:
    addr = Msg(
        {"index": 3, "prefixlen": 64, "flags": 0x80, "scope": 0},
        {"IFA_ADDRESS": "fd00::3", "IFA_FLAGS": 0x240},
    )
    assert a.address_of(addr) == k.Address(3, ipaddress.ip_interface("fd00::3/64"), 0x240, 0)
    assert a.address_of(Msg({"index": 3, "prefixlen": 8}, {})) is None
    route = Msg(
        {"family": 2, "dst_len": 0, "table": 254, "proto": 3, "scope": 0, "type": 1, "flags": 0},
        {
            "RTA_GATEWAY": "10.0.0.1",
            "RTA_MULTIPATH": [{"oif": 5}, {"oif": 6}],
            "RTA_METRICS": Msg({}, {"RTAX_MTU": 1400}),
        },
    )
    got = a.route_of(route)
    assert got is not None
    assert (got.dst, got.gateway, got.multipath_oifs, got.mtu, got.priority) == (
        NET("0.0.0.0/0"),
        IP("10.0.0.1"),
        (5, 6),
        1400,
        None,
    )
    assert a.route_of(Msg({"family": 7}, {})) is None
    rule = Msg(
        {"family": 2, "table": 0, "src_len": 32},
        {"FRA_TABLE": 100, "FRA_SRC": "10.1.0.5", "FRA_PRIORITY": 32765},
    )
    assert a.rule_of(rule) == k.Rule(2, 100, NET("10.1.0.5/32"), 32765)


def test_route_spec_gives_pyroute2_only_what_is_set() -> None:
    assert a.route_spec(k.Route(NET("10.2.0.0/16"))) == {"dst": "10.2.0.0/16"}
    full = k.Route(
        NET("10.2.0.0/16"),
        oif=3,
        gateway=IP("10.0.0.1"),
        table=100,
        proto=3,
        scope=0,
        type=1,
        flags=4,
        priority=9,
        prefsrc=IP("10.0.0.2"),
        mtu=1400,
    )
    assert a.route_spec(full) == {
        "dst": "10.2.0.0/16",
        "oif": 3,
        "gateway": "10.0.0.1",
        "table": 100,
        "proto": 3,
        "scope": 0,
        "type": 1,
        "flags": 4,
        "priority": 9,
        "prefsrc": "10.0.0.2",
        "metrics": {"RTAX_MTU": 1400},
    }


def test_pyroute2_errors_become_ours() -> None:
    from pyroute2.netlink.exceptions import NetlinkError as Pyroute2Error

    with pytest.raises(k.NetlinkError) as exc, a._translated():
        raise Pyroute2Error(errno.EEXIST, "File exists")
    assert exc.value.exists and str(exc.value) == "(17, 'File exists')"
    with pytest.raises(ValueError), a._translated():  # anything else is not a kernel answer
        raise ValueError("x")
