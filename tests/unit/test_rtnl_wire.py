"""The native rtnetlink client on byte strings: framing, replies, decoding and request encoding.

Expected bytes are written out by hand from the kernel's layouts (linux/netlink.h,
linux/rtnetlink.h, linux/if_link.h), not produced by the code under test.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest

from pycni.net.rtnl import messages as m
from pycni.net.rtnl import wire
from pycni.net.rtnl.hybrid import HybridIPRoute

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


def _rta(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((-length) % 4)


def test_link_decodes_header_and_attributes() -> None:
    vxlan_data = _rta(1, struct.pack("=I", 42)) + _rta(15, struct.pack("!H", 4789))
    linkinfo = _rta(1, b"vxlan\0") + _rta(2 | 0x8000, vxlan_data)
    payload = (
        struct.pack("=BxHiII", socket.AF_UNSPEC, 1, 9, 0x1043, 0)
        + _rta(3, b"flannel.1\0")
        + _rta(4, struct.pack("=I", 1450))
        + _rta(1, bytes.fromhex("020000aabbcc"))
        + _rta(16, b"\x06")
        + _rta(18 | 0x8000, linkinfo)
    )
    link = m.link(payload)
    assert (link["index"], link["flags"], link["ifi_type"]) == (9, 0x1043, 1)
    assert link.get_attr("IFLA_IFNAME") == "flannel.1"
    assert link.get_attr("IFLA_MTU") == 1450
    assert link.get_attr("IFLA_ADDRESS") == "02:00:00:aa:bb:cc"
    assert link.get_attr("IFLA_OPERSTATE") == "UP"
    assert link.get_attr("IFLA_MASTER") is None
    info = link.get_attr("IFLA_LINKINFO")
    assert info.get_attr("IFLA_INFO_KIND") == "vxlan"
    data = info.get_attr("IFLA_INFO_DATA")
    assert (data.get_attr("IFLA_VXLAN_ID"), data.get_attr("IFLA_VXLAN_PORT")) == (42, 4789)


def test_unknown_attribute_names_are_a_programming_error() -> None:
    link = m.link(struct.pack("=BxHiII", 0, 1, 1, 0, 0))
    with pytest.raises(KeyError):
        link.get_attr("IFLA_NO_SUCH_THING")


def test_addr_and_route_decode() -> None:
    addr = m.addr(
        struct.pack("=BBBBI", socket.AF_INET6, 64, 0x80, 0, 5)
        + _rta(1, socket.inet_pton(socket.AF_INET6, "fd00::5"))
    )
    assert (addr["family"], addr["prefixlen"], addr["index"]) == (socket.AF_INET6, 64, 5)
    assert addr.get_attr("IFA_ADDRESS") == "fd00::5"
    route = m.route(
        struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 254, 4, 0, 1, 0)
        + _rta(1, socket.inet_aton("10.1.2.0"))
        + _rta(5, socket.inet_aton("10.1.0.1"))
        + _rta(4, struct.pack("=I", 3))
    )
    assert (route["dst_len"], route["proto"], route["type"]) == (24, 4, 1)
    assert route.get_attr("RTA_DST") == "10.1.2.0"
    assert route.get_attr("RTA_GATEWAY") == "10.1.0.1"
    assert route.get_attr("RTA_OIF") == 3


# ------------------------------------------------------------------ encoding


class _Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[int, int, bytes]] = []

    def request(self, kind: int, flags: int, body: bytes) -> list[Any]:
        self.requests.append((kind, flags, body))
        return []


def _client() -> tuple[HybridIPRoute, _Recorder]:
    client = HybridIPRoute.__new__(HybridIPRoute)
    recorder = _Recorder()
    client._sock = recorder  # type: ignore[assignment]
    client._fallback = None
    return client, recorder


def test_veth_add_with_its_peer_in_another_namespace() -> None:
    client, rec = _client()
    client.link("add", ifname="veth1", kind="veth", peer={"ifname": "eth0", "net_ns_fd": 11})
    ((kind, flags, body),) = rec.requests
    assert kind == 16  # RTM_NEWLINK
    assert flags == wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL
    peer = (
        struct.pack("=BxHiII", 0, 0, 0, 0, 0) + _rta(3, b"eth0\0") + _rta(28, b"\x0b\0\0\0")
    )  # IFLA_NET_NS_FD
    info = _rta(1, b"veth\0") + _rta(2 | 0x8000, _rta(1, peer))
    expected = struct.pack("=BxHiII", 0, 0, 0, 0, 0) + _rta(3, b"veth1\0") + _rta(18 | 0x8000, info)
    assert body == expected


def test_ipv4_address_add_carries_local_and_address() -> None:
    client, rec = _client()
    client.addr("add", index=4, address="10.22.0.5", prefixlen=16)
    ((kind, flags, body),) = rec.requests
    packed = socket.inet_aton("10.22.0.5")
    assert kind == 20  # RTM_NEWADDR
    assert flags == wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL
    assert body == struct.pack("=BBBBI", socket.AF_INET, 16, 0, 0, 4) + _rta(2, packed) + _rta(
        1, packed
    )


def test_route_add_defaults_to_static_unicast_and_delete_to_any() -> None:
    client, rec = _client()
    client.route("add", dst="10.9.0.0/24", gateway="10.1.0.1", oif=3)
    client.route("del", dst="10.9.0.0/24", gateway="10.1.0.1", oif=3)
    (k_add, f_add, add), (k_del, f_del, delete) = rec.requests
    attrs = (
        _rta(15, struct.pack("=I", 254))
        + _rta(1, socket.inet_aton("10.9.0.0"))
        + _rta(4, struct.pack("=I", 3))
        + _rta(5, socket.inet_aton("10.1.0.1"))
    )
    assert (k_add, f_add) == (24, wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL)
    assert add == struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 254, 4, 0, 1, 0) + attrs
    assert (k_del, f_del) == (25, wire.NLM_F_ACK)
    assert delete == struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 254, 0, 0, 0, 0) + attrs


def test_route_in_a_high_table_uses_the_compat_header_value() -> None:
    client, rec = _client()
    client.route("replace", dst="fd00::/64", table=1000, proto=3)
    ((kind, flags, body),) = rec.requests
    assert kind == 24  # RTM_NEWROUTE
    assert flags == wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_REPLACE
    header = struct.pack("=BBBBBBBBI", socket.AF_INET6, 64, 0, 0, 252, 3, 0, 1, 0)
    assert body == header + _rta(15, struct.pack("=I", 1000)) + _rta(
        1, socket.inet_pton(socket.AF_INET6, "fd00::")
    )
