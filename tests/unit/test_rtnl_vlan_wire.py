"""ipvlan, 802.1Q and bridge-VLAN messages of the native client, on byte strings.

Expected bytes are written out by hand from the kernel's layouts (linux/if_link.h:
IFLA_IPVLAN_*, IFLA_VLAN_*, IFLA_BR_VLAN_FILTERING; linux/if_bridge.h: IFLA_BRIDGE_FLAGS,
IFLA_BRIDGE_VLAN_INFO, struct bridge_vlan_info), not produced by the code under test.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pycni.net import sublink
from pycni.net.netlink.kernel import Link, NetlinkError
from pycni.net.netlink.rtnl import codec as c
from pycni.net.netlink.rtnl import wire
from tests.unit.test_rtnl_wire import CREATE, _client, _ifinfo, _rta

HDR = struct.pack("=BxHiII", 0, 0, 0, 0, 0)  # AF_UNSPEC ifinfomsg, nothing set
NESTED = 0x8000


def _bridge_hdr(index: int) -> bytes:
    return struct.pack("=BxHiII", 7, 0, index, 0, 0)  # AF_BRIDGE


def test_ipvlan_create_carries_mode_flags_master_netns_and_no_txqlen() -> None:
    client, rec = _client()
    client.add_ipvlan("tmp0", 4, 2, 1, 11, mtu=1400)
    ((kind, flags, body),) = rec.requests
    assert (kind, flags) == (16, CREATE)  # RTM_NEWLINK, create exclusively
    data = _rta(1, struct.pack("=H", 2)) + _rta(2, struct.pack("=H", 1))  # l3s, private
    info = _rta(1, b"ipvlan\0") + _rta(2 | NESTED, data)
    assert body == (
        HDR
        + _rta(3, b"tmp0\0")
        + _rta(4, struct.pack("=I", 1400))  # no IFLA_TXQLEN: the kernel's default
        + _rta(5, struct.pack("=I", 4))  # IFLA_LINK: the master
        + _rta(28, struct.pack("=I", 11))  # IFLA_NET_NS_FD
        + _rta(18 | NESTED, info)
    )


def test_vlan_create_carries_the_id_and_no_mtu_when_zero() -> None:
    client, rec = _client()
    client.add_vlan("tmp1", 3, 100, 9)
    ((kind, flags, body),) = rec.requests
    assert (kind, flags) == (16, CREATE)
    info = _rta(1, b"vlan\0") + _rta(2 | NESTED, _rta(1, struct.pack("=H", 100)))
    assert body == (
        HDR
        + _rta(3, b"tmp1\0")
        + _rta(5, struct.pack("=I", 3))
        + _rta(28, struct.pack("=I", 9))
        + _rta(18 | NESTED, info)
    )


def test_bridge_with_vlan_filtering_is_native() -> None:
    client, rec = _client()
    client.add_bridge("br0", 9000, vlan_filtering=True)
    client.add_bridge("br1")
    (_, _, filtering), (_, _, plain) = rec.requests
    info = _rta(1, b"bridge\0") + _rta(2 | NESTED, _rta(7, b"\x01"))  # IFLA_BR_VLAN_FILTERING
    assert filtering == (
        HDR + _rta(3, b"br0\0") + _rta(4, struct.pack("=I", 9000)) + _rta(18 | NESTED, info)
    )
    assert plain == HDR + _rta(3, b"br1\0") + _rta(18 | NESTED, _rta(1, b"bridge\0"))


def test_port_vlan_add_and_delete_are_af_bridge_af_spec_with_the_master_flag() -> None:
    client, rec = _client()
    client.add_port_vlan(12, 100, 0x2 | 0x4)  # PVID, untagged
    client.delete_port_vlan(12, 1)
    (add_kind, add_flags, add), (del_kind, _, delete) = rec.requests
    assert (add_kind, add_flags, del_kind) == (19, wire.NLM_F_ACK, 17)  # SETLINK, DELLINK

    def spec(flags: int, vid: int) -> bytes:
        return _rta(
            26 | NESTED,  # IFLA_AF_SPEC
            _rta(0, struct.pack("=H", 1))  # IFLA_BRIDGE_FLAGS: BRIDGE_FLAGS_MASTER
            + _rta(2, struct.pack("=HH", flags, vid)),  # IFLA_BRIDGE_VLAN_INFO
        )

    assert add == _bridge_hdr(12) + spec(6, 100)
    assert delete == _bridge_hdr(12) + spec(0, 1)


@pytest.mark.parametrize("vid", [0, 4095, -1, 70000])
def test_a_vlan_id_outside_1_4094_is_refused_before_sending(vid: int) -> None:
    client, rec = _client()
    with pytest.raises(ValueError):
        client.add_port_vlan(3, vid)
    assert rec.requests == []


def _bridge_reply(index: int, vlans: list[tuple[int, int]]) -> bytes:
    spec = b"".join(_rta(2, struct.pack("=HH", flags, vid)) for vid, flags in vlans)
    return _bridge_hdr(index) + _rta(3, b"p\0") + _rta(26 | NESTED, _rta(0, b"\x01\x00") + spec)


def test_port_vlans_dump_every_port_and_keep_the_asked_one() -> None:
    replies = [
        (16, _bridge_reply(5, [(1, 6)])),  # the bridge itself
        (16, _bridge_reply(12, [(1, 4), (100, 6), (200, 0)])),
        (16, _bridge_hdr(13)),  # a port without IFLA_AF_SPEC
    ]
    client, rec = _client(replies)
    assert client.port_vlans(12) == [1, 100, 200]
    ((kind, flags, body),) = rec.requests
    assert (kind, flags) == (18, wire.NLM_F_DUMP)  # RTM_GETLINK dump
    assert body == _bridge_hdr(0) + _rta(29, struct.pack("=I", 2))  # RTEXT_FILTER_BRVLAN
    client, _ = _client(replies)
    assert client.port_vlans(13) == []
    client, _ = _client(replies)
    assert client.port_vlans(99) == []


def test_decode_bridge_vlans_stops_at_a_bogus_length() -> None:
    spec = _rta(2, struct.pack("=HH", 4, 7)) + struct.pack("=HH", 1, 2) + b"junk"
    payload = _bridge_hdr(4) + _rta(26 | NESTED, spec)
    assert c.decode_bridge_vlans(payload) == (4, [(7, 4)])


@given(
    vlans=st.lists(
        st.tuples(st.integers(1, 4094), st.integers(0, 0xFFFF)),
        max_size=20,
        unique_by=lambda v: v[0],
    ),
    index=st.integers(1, 2**31 - 1),
)
def test_bridge_vlans_round_trip(vlans: list[tuple[int, int]], index: int) -> None:
    assert c.decode_bridge_vlans(_bridge_reply(index, vlans)) == (index, vlans)


def _linkinfo_reply(kind: bytes, data: bytes) -> bytes:
    info = _rta(1, kind + b"\0") + _rta(2 | NESTED, data)
    return _ifinfo(8) + _rta(3, b"eth0\0") + _rta(18 | NESTED, info)


@given(mode=st.integers(0, 2), flag=st.integers(0, 2))
def test_ipvlan_mode_and_flags_round_trip(mode: int, flag: int) -> None:
    body = c.new_ipvlan("x", 2, mode, flag, 5)
    # the request's IFLA_LINKINFO, answered back as the kernel would report it
    linkinfo = wire.parse_attrs(body, c.IFINFOMSG.size, len(body))[c.IFLA_LINKINFO]
    link = c.decode_link(_ifinfo(8) + _rta(18 | NESTED, linkinfo))
    assert (link.kind, link.ipvlan_mode, link.ipvlan_flags) == ("ipvlan", mode, flag)
    assert sublink.ipvlan_mode_name(link) == ("l2", "l3", "l3s")[mode]
    assert sublink.ipvlan_flag_name(link) == ("bridge", "private", "vepa")[flag]


@given(vid=st.integers(0, 4094))
def test_vlan_id_round_trips(vid: int) -> None:
    body = c.new_vlan("x", 2, vid, 5)
    linkinfo = wire.parse_attrs(body, c.IFINFOMSG.size, len(body))[c.IFLA_LINKINFO]
    link = c.decode_link(_ifinfo(8) + _rta(18 | NESTED, linkinfo))
    assert (link.kind, link.vlan_id, link.ipvlan_mode) == ("vlan", vid, None)


def test_ipvlan_reply_without_flags_is_bridge_and_other_kinds_have_none() -> None:
    link = c.decode_link(_linkinfo_reply(b"ipvlan", _rta(1, struct.pack("=H", 1))))
    assert (link.ipvlan_mode, link.ipvlan_flags, link.vlan_id) == (1, 0, None)
    veth = c.decode_link(_linkinfo_reply(b"veth", b""))
    assert (veth.kind, veth.ipvlan_mode, veth.vlan_id, veth.macvlan_mode) == (
        "veth",
        None,
        None,
        None,
    )


def test_ipvlan_mode_and_flag_names() -> None:
    assert [sublink.ipvlan_mode(m) for m in ("", "l2", "l3", "l3s")] == [0, 0, 1, 2]
    assert [sublink.ipvlan_flag(f) for f in ("", "bridge", "private", "vepa")] == [0, 0, 1, 2]
    for bad in ("L2", "l4", "passthru", " l2"):
        with pytest.raises(ValueError):
            sublink.ipvlan_mode(bad)
    with pytest.raises(ValueError):
        sublink.ipvlan_flag("source")
    assert sublink.ipvlan_mode_name(Link(index=1, name="x", kind="macvlan")) == ""


def test_create_in_netns_retries_a_taken_name_and_raises_anything_else() -> None:
    tried: list[str] = []

    def taken_twice(name: str) -> None:
        tried.append(name)
        if len(tried) < 3:
            raise NetlinkError(17)  # EEXIST

    assert sublink.create_in_netns(taken_twice) == tried[-1]
    assert len(tried) == 3 and len(set(tried)) == 3 and all(n.startswith("veth") for n in tried)

    def refused(name: str) -> None:
        raise NetlinkError(95)

    with pytest.raises(NetlinkError) as info:
        sublink.create_in_netns(refused)
    assert info.value.not_supported
