"""The native rtnetlink client on byte strings: framing, replies, decoding and request encoding.

Expected bytes are written out by hand from the kernel's layouts (linux/netlink.h,
linux/rtnetlink.h, linux/if_link.h), not produced by the code under test.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

import pytest

from pycni.net.netlink import kernel as k
from pycni.net.netlink.rtnl import codec as c
from pycni.net.netlink.rtnl import wire
from pycni.net.netlink.rtnl.native import NativeKernel

# ------------------------------------------------------------------ attributes


def test_attr_is_length_type_payload_padded_to_four() -> None:
    assert wire.attr(3, b"ab") == b"\x06\x00\x03\x00ab\x00\x00"
    assert wire.attr(3, b"abcd") == b"\x08\x00\x03\x00abcd"
    assert wire.attr(7, b"") == b"\x04\x00\x07\x00"


def test_attr_u32_str_and_nested() -> None:
    assert wire.attr_u32(4, 1500) == b"\x08\x00\x04\x00" + struct.pack("=I", 1500)
    assert wire.attr_str(3, "eth0") == b"\x09\x00\x03\x00eth0\x00\x00\x00\x00"
    inner = wire.attr_u32(1, 7)
    assert wire.nested(18, [inner]) == struct.pack("=HH", 4 + len(inner), 18 | 0x8000) + inner


def test_parse_attrs_aligns_masks_the_nested_flag_and_keeps_the_first() -> None:
    data = b"HDR!" + wire.attr(3, b"ab") + wire.attr(3, b"second") + wire.attr(18 | 0x8000, b"xyzw")
    found = wire.parse_attrs(data, 4, len(data))
    assert found == {3: b"ab", 18: b"xyzw"}


def test_parse_attrs_stops_at_a_bogus_length() -> None:
    data = wire.attr(1, b"okok") + struct.pack("=HH", 2, 9) + b"junk"
    assert wire.parse_attrs(data, 0, len(data)) == {1: b"okok"}


def test_parse_attrs_bounds_a_truncated_message() -> None:
    # the last attribute claims more bytes than are left: its payload is what there is; a
    # header cut short is not read; a range past the buffer stops at its end
    data = wire.attr(1, b"okok") + struct.pack("=HH", 40, 2) + b"shrt"
    assert wire.parse_attrs(data, 0, len(data)) == {1: b"okok", 2: b"shrt"}
    assert wire.parse_attrs(data[:-6], 0, len(data)) == {1: b"okok"}
    assert wire.parse_attrs(data, 0, 1000) == {1: b"okok", 2: b"shrt"}


# ------------------------------------------------------------------ replies


class _FakeNetlink:
    """A socket whose recv() returns queued datagrams; what was sent is kept."""

    def __init__(self, *datagrams: bytes) -> None:
        self.sent: list[bytes] = []
        self.queue = list(datagrams)

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, size: int) -> bytes:
        return self.queue.pop(0)


def _sock(*datagrams: bytes) -> tuple[wire.Socket, _FakeNetlink]:
    fake = _FakeNetlink(*datagrams)
    sock = wire.Socket.__new__(wire.Socket)
    sock.sock = fake  # type: ignore[assignment]
    sock._seq = 0
    return sock, fake


def _msg(mtype: int, seq: int, payload: bytes, flags: int = 0) -> bytes:
    length = 16 + len(payload)
    return (
        struct.pack("=IHHII", length, mtype, flags, seq, 0)
        + payload
        + b"\0" * (wire.align(length) - length)
    )


def _error(seq: int, errno: int) -> bytes:
    # nlmsgerr: a negative errno, then the header of the request it answers
    return _msg(2, seq, struct.pack("=i", -errno) + b"\0" * 16)


def test_request_frames_the_message_and_returns_on_the_ack() -> None:
    sock, fake = _sock(_error(1, 0))
    assert sock.request(16, wire.NLM_F_ACK, b"BODY") == []
    assert fake.sent == [struct.pack("=IHHII", 20, 16, 0x1 | 0x4, 1, 0) + b"BODY"]


def test_request_raises_the_errno_of_an_error_reply() -> None:
    sock, _ = _sock(_error(1, 17))
    with pytest.raises(wire.RtnlError) as info:
        sock.request(16, wire.NLM_F_ACK, b"")
    assert info.value.code == 17


def test_dump_collects_parts_across_datagrams_until_done() -> None:
    first = _msg(16, 1, b"one") + _msg(16, 1, b"two!")
    second = _msg(16, 1, b"three") + _msg(3, 1, struct.pack("=i", 0))
    sock, _ = _sock(first, second)
    replies = sock.request(18, wire.NLM_F_DUMP, b"")
    assert replies == [(16, b"one"), (16, b"two!"), (16, b"three")]


def test_replies_to_an_earlier_sequence_number_are_skipped() -> None:
    sock, _ = _sock(_error(7, 0) + _msg(16, 1, b"mine"))
    assert sock.request(18, 0, b"") == [(16, b"mine")]


def test_done_with_an_error_code_raises() -> None:
    sock, _ = _sock(_msg(3, 1, struct.pack("=i", -95)))
    with pytest.raises(wire.RtnlError) as info:
        sock.request(18, wire.NLM_F_DUMP, b"")
    assert info.value.code == 95


def test_a_truncated_header_is_a_protocol_error() -> None:
    sock, _ = _sock(struct.pack("=IHHII", 8, 16, 0, 1, 0))
    with pytest.raises(wire.RtnlError) as info:
        sock.request(18, 0, b"")
    assert info.value.code == 71


# ------------------------------------------------------------------ decoding

IP = ipaddress.ip_address
NET = ipaddress.ip_network
IFACE = ipaddress.ip_interface


def _rta(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((-length) % 4)


def _ifinfo(index: int, flags: int = 0) -> bytes:
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 1, index, flags, 0)


def test_link_decodes_header_and_attributes() -> None:
    vxlan_data = (
        _rta(1, struct.pack("=I", 42))
        + _rta(3, struct.pack("=I", 2))
        + _rta(4, socket.inet_aton("10.0.0.7"))
        + _rta(7, b"\x00")
        + _rta(15, struct.pack("!H", 4789))
    )
    linkinfo = _rta(1, b"vxlan\0") + _rta(2 | 0x8000, vxlan_data)
    payload = (
        _ifinfo(9, 0x1043)
        + _rta(3, b"flannel.1\0")
        + _rta(4, struct.pack("=I", 1450))
        + _rta(1, bytes.fromhex("020000aabbcc"))
        + _rta(16, b"\x06")
        + _rta(13, struct.pack("=I", 1000))
        + _rta(20, b"an alias\0")
        + _rta(30, struct.pack("=I", 1))
        + _rta(5, struct.pack("=I", 2))
        + _rta(37, struct.pack("=i", 3))
        + _rta(18 | 0x8000, linkinfo)
    )
    assert c.decode_link(payload) == k.Link(
        index=9,
        name="flannel.1",
        flags=0x1043,
        mac="02:00:00:aa:bb:cc",
        mtu=1450,
        master=0,
        peer_index=2,
        peer_netnsid=3,
        kind="vxlan",
        oper_state="up",
        alias="an alias",
        txqlen=1000,
        promiscuity=1,
        vxlan=k.VxlanInfo(vni=42, local=IP("10.0.0.7"), underlay_index=2, port=4789),
    )


def test_link_without_attributes_has_the_defaults() -> None:
    link = c.decode_link(_ifinfo(1))
    assert link == k.Link(index=1, name="")
    assert not link.up and link.oper_state == "unknown" and link.peer_netnsid is None


def test_macvlan_mode_and_an_unknown_operstate() -> None:
    linkinfo = _rta(1, b"macvlan\0") + _rta(2 | 0x8000, _rta(1, struct.pack("=I", 8)))
    link = c.decode_link(_ifinfo(4, 0x1) + _rta(16, b"\x09") + _rta(18 | 0x8000, linkinfo))
    assert (link.kind, link.macvlan_mode, link.oper_state, link.up) == ("macvlan", 8, "9", True)


def test_vrf_table_decodes_and_new_vrf_encodes_it() -> None:
    linkinfo = _rta(1, b"vrf\0") + _rta(2 | 0x8000, _rta(1, struct.pack("=I", 1042)))
    link = c.decode_link(_ifinfo(6) + _rta(3, b"red\0") + _rta(18 | 0x8000, linkinfo))
    assert (link.kind, link.vrf_table, link.name) == ("vrf", 1042, "red")
    # the request carries the same IFLA_LINKINFO layout, which the decoder reads back
    sent = c.decode_link(c.new_vrf("red", 1042))
    assert (sent.kind, sent.vrf_table, sent.name) == ("vrf", 1042, "red")
    dummy = c.decode_link(_ifinfo(7) + _rta(18 | 0x8000, _rta(1, b"dummy\0")))
    assert (dummy.kind, dummy.vrf_table) == ("dummy", None)


def test_addr_decode() -> None:
    v6 = c.decode_address(
        struct.pack("=BBBBI", socket.AF_INET6, 64, 0x80, 0, 5)
        + _rta(1, socket.inet_pton(socket.AF_INET6, "fd00::5"))
        + _rta(8, struct.pack("=I", 0x240))
    )
    assert v6 == k.Address(5, IFACE("fd00::5/64"), flags=0x240, scope=0)
    assert v6.family == k.AF_INET6
    v4 = c.decode_address(
        struct.pack("=BBBBI", socket.AF_INET, 24, 0x80, 253, 3)
        + _rta(2, socket.inet_aton("10.0.0.1"))
    )  # IFA_LOCAL only; no IFA_FLAGS: the header's flags
    assert v4 == k.Address(3, IFACE("10.0.0.1/24"), flags=0x80, scope=253)
    assert c.decode_address(struct.pack("=BBBBI", socket.AF_INET, 24, 0, 0, 3)) is None
    assert c.decode_address(struct.pack("=BBBBI", 17, 24, 0, 0, 3) + _rta(1, b"x" * 6)) is None


def test_addr_decode_of_odd_replies() -> None:
    # the address's length, not the header's family, picks the version (as the text path
    # did); a bad-length IFA_ADDRESS is not replaced by IFA_LOCAL; a prefix too long for
    # the address fails as ipaddress.ip_interface does
    v6_in_v4 = c.decode_address(
        struct.pack("=BBBBI", socket.AF_INET, 128, 0, 0, 4)
        + _rta(1, socket.inet_pton(socket.AF_INET6, "fe80::1"))
    )
    assert v6_in_v4 == k.Address(4, IFACE("fe80::1/128"), flags=0, scope=0)
    bad = struct.pack("=BBBBI", socket.AF_INET, 24, 0, 0, 3) + _rta(1, b"abc")
    assert c.decode_address(bad + _rta(2, socket.inet_aton("10.0.0.1"))) is None
    too_long = struct.pack("=BBBBI", socket.AF_INET, 33, 0, 0, 3) + _rta(1, b"\n\0\0\1")
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 interface"):
        c.decode_address(too_long)


def test_route_decode() -> None:
    metrics = _rta(2, struct.pack("=I", 1400))
    hop = struct.pack("=HBBi", 8, 0, 0, 6)
    route = c.decode_route(
        struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 252, 4, 253, 1, 4)
        + _rta(1, socket.inet_aton("10.1.2.0"))
        + _rta(5, socket.inet_aton("10.1.0.1"))
        + _rta(4, struct.pack("=I", 3))
        + _rta(6, struct.pack("=I", 100))
        + _rta(7, socket.inet_aton("10.1.0.9"))
        + _rta(15, struct.pack("=I", 1000))
        + _rta(8 | 0x8000, metrics)
        + _rta(9, hop + hop)
    )
    assert route == k.Route(
        dst=NET("10.1.2.0/24"),
        oif=3,
        gateway=IP("10.1.0.1"),
        table=1000,
        proto=4,
        scope=253,
        type=1,
        flags=4,
        priority=100,
        prefsrc=IP("10.1.0.9"),
        mtu=1400,
        multipath_oifs=(6, 6),
    )
    default = c.decode_route(struct.pack("=BBBBBBBBI", socket.AF_INET6, 0, 0, 0, 254, 2, 0, 1, 0))
    assert default is not None
    assert (default.dst, default.table, default.priority, default.gateway) == (
        NET("::/0"),
        254,
        None,
        None,
    )
    assert c.decode_route(struct.pack("=BBBBBBBBI", 7, 0, 0, 0, 254, 2, 0, 1, 0)) is None


# ------------------------------------------------------------------ encoding


class _Recorder:
    def __init__(self, *replies: list[tuple[int, bytes]]) -> None:
        self.requests: list[tuple[int, int, bytes]] = []
        self.replies = list(replies)

    def request(self, kind: int, flags: int, body: bytes) -> list[tuple[int, bytes]]:
        self.requests.append((kind, flags, body))
        return self.replies.pop(0) if self.replies else []

    def close(self) -> None:
        pass


def _client(*replies: list[tuple[int, bytes]]) -> tuple[NativeKernel, _Recorder]:
    client = NativeKernel.__new__(NativeKernel)
    recorder = _Recorder(*replies)
    client._sock = recorder  # type: ignore[assignment]
    return client, recorder


CREATE = wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL


def test_veth_add_with_its_peer_in_another_namespace() -> None:
    client, rec = _client()
    assert client.add_veth("veth1", "eth0", 11) == 0  # no echo (kernel < 6.3): index unknown
    ((kind, flags, body),) = rec.requests
    assert kind == 16  # RTM_NEWLINK
    assert flags == CREATE | wire.NLM_F_ECHO
    peer = (
        struct.pack("=BxHiII", 0, 0, 0, 0, 0) + _rta(3, b"eth0\0") + _rta(28, b"\x0b\0\0\0")
    )  # IFLA_NET_NS_FD
    info = _rta(1, b"veth\0") + _rta(2 | 0x8000, _rta(1, peer))
    expected = struct.pack("=BxHiII", 0, 0, 0, 0, 0) + _rta(3, b"veth1\0") + _rta(18 | 0x8000, info)
    assert body == expected


def test_veth_enslaved_at_creation_and_its_echoed_index() -> None:
    other = struct.pack("=BxHiII", 0, 0, 8, 0, 0) + _rta(3, b"veth9\0")
    echoed = struct.pack("=BxHiII", 0, 0, 42, 0, 0) + _rta(3, b"veth1\0")
    client, rec = _client([(16, other), (16, echoed)])
    assert client.add_veth("veth1", "eth0", 11, master=7) == 42  # the echo naming our link
    ((_kind, _flags, body),) = rec.requests
    assert body.endswith(_rta(10, struct.pack("=I", 7)))  # IFLA_MASTER
    assert _rta(10, struct.pack("=I", 7)) not in c.new_veth("veth1", "eth0", 11)


def test_veth_with_mtu_and_peer_mac() -> None:
    body = c.new_veth("v", "e", 3, mtu=1400, peer_mac="02:00:00:00:00:01")
    mtu = _rta(4, struct.pack("=I", 1400))
    peer = (
        struct.pack("=BxHiII", 0, 0, 0, 0, 0)
        + _rta(3, b"e\0")
        + mtu
        + _rta(1, bytes.fromhex("020000000001"))
        + _rta(28, struct.pack("=I", 3))
    )
    info = _rta(1, b"veth\0") + _rta(2 | 0x8000, _rta(1, peer))
    assert body == struct.pack("=BxHiII", 0, 0, 0, 0, 0) + _rta(3, b"v\0") + mtu + _rta(
        18 | 0x8000, info
    )


def test_veth_txqlen_is_the_new_ends_only() -> None:
    """The host end of a pod's veth gets v1.9.1's explicit 0; the peer (the pod's end) none, so
    the kernel gives it its default."""
    client, rec = _client()
    client.add_veth("veth1", "eth0", 11, txqlen=0)
    ((_, _, body),) = rec.requests
    zero = _rta(13, struct.pack("=I", 0))
    peer = c.ifinfo() + _rta(3, b"eth0\0") + _rta(28, struct.pack("=I", 11))
    assert body.count(zero) == 1 and peer in body  # the peer's attributes carry no IFLA_TXQLEN
    assert zero not in c.new_veth("veth1", "eth0", 11)


def test_ifb_carries_a_zero_txqlen() -> None:
    client, rec = _client()
    client.add_ifb("bwp0", 1500, 0)
    ((_, _, body),) = rec.requests
    assert _rta(13, struct.pack("=I", 0)) in body and _rta(1, b"ifb\0") in body


def test_link_set_up_master_alias_and_flags() -> None:
    client, rec = _client()
    client.set_link(7, up=True, master=3, alias="", flags=0x100, flag_mask=0x100)
    client.set_link(7, up=False, name="eth1", netns_fd=9)
    (_, f1, up), (_, _, down) = rec.requests
    assert f1 == wire.NLM_F_ACK
    assert up == struct.pack("=BxHiII", 0, 0, 7, 0x101, 0x101) + _rta(
        10, struct.pack("=I", 3)
    ) + _rta(20, b"\0")
    assert down == struct.pack("=BxHiII", 0, 0, 7, 0, 0x1) + _rta(3, b"eth1\0") + _rta(
        28, struct.pack("=I", 9)
    )


def test_a_bad_mac_is_refused_before_sending() -> None:
    client, rec = _client()
    with pytest.raises(ValueError):
        client.set_link(7, mac="02:00:00:00:00")
    assert rec.requests == []


def test_link_by_name_and_not_found() -> None:
    payload = _ifinfo(5) + _rta(3, b"eth0\0")
    client, rec = _client([(16, payload)])
    assert client.find_link("eth0") == k.Link(index=5, name="eth0")
    ((kind, flags, body),) = rec.requests
    assert (kind, flags) == (18, 0)  # RTM_GETLINK, a single answer
    assert body == c.ifinfo() + c.EXT_MASK + _rta(3, b"eth0\0")
    client, _ = _client([])
    with pytest.raises(k.NetlinkError) as exc:
        client.link(5)
    assert exc.value.no_such_link


def test_ipv4_address_add_carries_local_address_and_broadcast() -> None:
    """IFA_LOCAL and IFA_ADDRESS as iproute2; IFA_BROADCAST as Go's netlink library (the
    subnet's last address, for prefixes up to /30); none for /31 and /32 (RFC 3021)."""
    client, rec = _client()
    client.add_address(4, IFACE("10.22.0.5/16"))
    client.add_address(4, IFACE("10.23.0.5/31"))
    (kind, flags, body), (_k, _f, point) = rec.requests
    packed = socket.inet_aton("10.22.0.5")
    assert kind == 20  # RTM_NEWADDR
    assert flags == CREATE
    assert body == struct.pack("=BBBBI", socket.AF_INET, 16, 0, 0, 4) + _rta(2, packed) + _rta(
        1, packed
    ) + _rta(4, socket.inet_aton("10.22.255.255"))
    other = socket.inet_aton("10.23.0.5")
    assert point == struct.pack("=BBBBI", socket.AF_INET, 31, 0, 0, 4) + _rta(2, other) + _rta(
        1, other
    )
    client.delete_address(4, IFACE("10.22.0.5/16"))  # a delete names no broadcast
    assert rec.requests[-1][2] == body[: -len(_rta(4, b"1234"))]


def test_address_dump_is_filtered_again_here() -> None:
    mine = struct.pack("=BBBBI", socket.AF_INET, 24, 0, 0, 4) + _rta(
        1, socket.inet_aton("10.0.0.1")
    )
    other = struct.pack("=BBBBI", socket.AF_INET, 24, 0, 0, 5) + _rta(
        1, socket.inet_aton("10.0.1.1")
    )
    client, rec = _client([(20, mine), (20, other), (3, b"")])
    assert client.addresses(index=4) == [k.Address(4, IFACE("10.0.0.1/24"))]
    ((kind, flags, body),) = rec.requests
    assert (kind, flags, body) == (22, wire.NLM_F_DUMP, struct.pack("=BBBBI", 0, 0, 0, 0, 4))


def test_route_add_defaults_to_static_unicast_and_delete_to_any() -> None:
    client, rec = _client()
    route = k.Route(NET("10.9.0.0/24"), oif=3, gateway=IP("10.1.0.1"))
    client.add_route(route)
    client.delete_route(route)
    (k_add, f_add, add), (k_del, f_del, delete) = rec.requests
    attrs = (
        _rta(15, struct.pack("=I", 254))
        + _rta(1, socket.inet_aton("10.9.0.0"))
        + _rta(4, struct.pack("=I", 3))
        + _rta(5, socket.inet_aton("10.1.0.1"))
    )
    assert (k_add, f_add) == (24, CREATE)
    assert add == struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 254, 4, 0, 1, 0) + attrs
    assert (k_del, f_del) == (25, wire.NLM_F_ACK)
    assert delete == struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 254, 0, 0, 0, 0) + attrs


def test_route_in_a_high_table_uses_the_compat_header_value() -> None:
    client, rec = _client()
    client.replace_route(k.Route(NET("fd00::/64"), table=1000, proto=3))
    ((kind, flags, body),) = rec.requests
    assert kind == 24  # RTM_NEWROUTE
    assert flags == wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_REPLACE
    header = struct.pack("=BBBBBBBBI", socket.AF_INET6, 64, 0, 0, 252, 3, 0, 1, 0)
    assert body == header + _rta(15, struct.pack("=I", 1000)) + _rta(
        1, socket.inet_pton(socket.AF_INET6, "fd00::")
    )


def test_route_with_everything() -> None:
    route = k.Route(
        NET("0.0.0.0/0"),
        oif=2,
        gateway=IP("10.0.0.1"),
        proto=3,
        scope=0,
        type=1,
        flags=4,
        priority=9,
        prefsrc=IP("10.0.0.5"),
        mtu=1400,
    )
    body = c.route(route, deleting=False)
    assert body == (
        struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 254, 3, 0, 1, 4)
        + _rta(15, struct.pack("=I", 254))
        + _rta(4, struct.pack("=I", 2))
        + _rta(5, socket.inet_aton("10.0.0.1"))
        + _rta(6, struct.pack("=I", 9))
        + _rta(7, socket.inet_aton("10.0.0.5"))
        + _rta(8 | 0x8000, _rta(2, struct.pack("=I", 1400)))
    )
    with pytest.raises(ValueError):
        c.route(k.Route(NET("10.0.0.0/8"), gateway=IP("fd00::1")), deleting=False)


def test_route_dump_by_table_and_link() -> None:
    assert c.dump_routes(socket.AF_INET, 100, 3) == struct.pack(
        "=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 100, 0, 0, 0, 0
    ) + _rta(15, struct.pack("=I", 100)) + _rta(4, struct.pack("=I", 3))
    assert c.get_route(IP("fd00::1")) == struct.pack(
        "=BBBBBBBBI", socket.AF_INET6, 128, 0, 0, 0, 0, 0, 0, 0
    ) + _rta(1, socket.inet_pton(socket.AF_INET6, "fd00::1"))


def test_netlink_error_names_its_errno() -> None:
    err = k.NetlinkError(17)
    assert isinstance(err, OSError) and err.errno == err.code == 17
    assert err.exists and not err.no_such_link and not err.no_such_entry
    assert str(err) == "(17, 'File exists')"
    assert k.NetlinkError(19).no_such_link and k.NetlinkError(3).no_such_entry
    assert k.NetlinkError(95).not_supported
    assert wire.RtnlError is k.NetlinkError
