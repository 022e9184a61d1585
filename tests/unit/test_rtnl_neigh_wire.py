"""The calls the native client once handed to pyroute2, on byte strings: neighbours, FDB
entries, vxlan creation and namespace ids.

pyroute2 is the oracle here, at test time only: its IPBatch compiles a request without
sending it, so each request of the native client is compared with the bytes pyroute2 builds
for the same call the retired adapter made (nested attributes aside: pyroute2 does not flag
them NLA_F_NESTED, the native client does, as iproute2). Dumps and replies, which the adapter
filtered in Python, are checked against the kernel's layouts written out by hand.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroute2.iproute.linux import IPBatch

from pycni.net.netlink.kernel import FdbEntry, IPAddress, Neighbour
from pycni.net.netlink.rtnl import codec as c
from pycni.net.netlink.rtnl import neigh_codec as nd
from pycni.net.netlink.rtnl import wire
from tests.unit.test_rtnl_wire import CREATE, _client, _rta

IP = ipaddress.ip_address
NESTED = 0x8000
REPLACE = wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_REPLACE


@pytest.fixture(scope="module")
def batch() -> Iterator[IPBatch]:
    compiler = IPBatch()
    yield compiler
    compiler.close()


def compiled(batch: IPBatch, call: str, *args: object, **kwargs: object) -> tuple[int, int, bytes]:
    """(type, flags, body) of the one message pyroute2 compiles for ``batch.call(...)``."""
    batch.reset()
    getattr(batch, call)(*args, **kwargs)
    data = bytes(batch.asyncore.batch)
    length, kind, flags, _seq, _pid = wire.NLMSGHDR.unpack_from(data)
    assert length == len(data)
    return kind, flags, data[wire.NLMSGHDR.size :]


def sent(request: tuple[int, int, bytes]) -> tuple[int, int, bytes]:
    """A request the native client made, flagged as the socket frames it (NLM_F_REQUEST)."""
    kind, flags, body = request
    return kind, flags | wire.NLM_F_REQUEST, body


def unflag_nested(data: bytes, start: int) -> bytes:
    """``data`` with NLA_F_NESTED cleared on every attribute from ``start`` on, recursively."""
    out = bytearray(data[:start])
    pos = start
    while pos + wire.RTATTR.size <= len(data):
        length, kind = wire.RTATTR.unpack_from(data, pos)
        payload = data[pos + wire.RTATTR.size : pos + length]
        if kind & NESTED:
            payload = unflag_nested(payload, 0)
        out += wire.RTATTR.pack(length, kind & ~NESTED) + payload
        out += b"\0" * (wire.align(length) - length)
        pos += wire.align(length)
    return bytes(out)


def raw_types(data: bytes, start: int) -> list[int]:
    """The type fields, flags included, of the attributes from ``start`` on (one level)."""
    out, pos = [], start
    while pos + wire.RTATTR.size <= len(data):
        length, kind = wire.RTATTR.unpack_from(data, pos)
        out.append(kind)
        pos += wire.align(length)
    return out


# ------------------------------------------------------------------ requests, against pyroute2


@pytest.mark.parametrize("address", ["10.72.0.9", "fd00::9"])
def test_set_neighbour_is_pyroute2s_permanent_replace(batch: IPBatch, address: str) -> None:
    client, rec = _client()
    client.set_neighbour(3, IP(address), "02:00:00:00:00:09")
    assert rec.requests[0][1] == REPLACE
    expected = compiled(
        batch, "neigh", "replace", dst=address, lladdr="02:00:00:00:00:09", ifindex=3, state=0x80
    )
    assert sent(rec.requests[0]) == expected


def test_delete_neighbour_is_pyroute2s(batch: IPBatch) -> None:
    client, rec = _client()
    client.delete_neighbour(3, IP("10.72.0.9"))
    assert sent(rec.requests[0]) == compiled(batch, "neigh", "del", dst="10.72.0.9", ifindex=3)


@pytest.mark.parametrize("remote", ["10.72.0.10", "fd00::10"])
def test_set_and_delete_fdb_are_pyroute2s_self_entries(batch: IPBatch, remote: str) -> None:
    client, rec = _client()
    client.set_fdb(5, "02:00:00:00:00:0a", IP(remote))
    client.delete_fdb(5, "02:00:00:00:00:0a", IP(remote))
    put, delete = (sent(r) for r in rec.requests)
    spec = {"ifindex": 5, "lladdr": "02:00:00:00:00:0a", "dst": remote, "flags": nd.NTF_SELF}
    assert put == compiled(batch, "fdb", "replace", state=0x80, **spec)
    assert delete == compiled(batch, "fdb", "del", **spec)
    assert delete[2][8:10] == b"\xc0\x00"  # NUD_PERMANENT | NUD_NOARP, as bridge fdb del


@pytest.mark.parametrize(
    ("local", "learning"), [("10.71.0.1", False), ("fd00::1", True), ("192.168.5.5", True)]
)
def test_add_vxlan_is_pyroute2s_but_nested(batch: IPBatch, local: str, learning: bool) -> None:
    client, rec = _client()
    client.add_vxlan("flannel.1", 8, IP(local), 4, 8472, 1350, learning)
    kind, flags, body = sent(rec.requests[0])
    assert rec.requests[0][1] == CREATE
    key = "vxlan_local6" if IP(local).version == 6 else "vxlan_local"
    expected = compiled(
        batch,
        "link",
        "add",
        ifname="flannel.1",
        kind="vxlan",
        vxlan_id=8,
        **{key: local},
        vxlan_link=4,
        vxlan_port=8472,
        vxlan_learning=int(learning),
        mtu=1350,
    )
    assert (kind, flags, unflag_nested(body, c.IFINFOMSG.size)) == expected
    assert raw_types(body, c.IFINFOMSG.size) == [3, 4, c.IFLA_LINKINFO | NESTED]  # name, mtu


def test_netns_id_request_is_pyroute2s(batch: IPBatch) -> None:
    client, rec = _client([(c.RTM_NEWNSID, _nsid_reply(3))])
    assert client.netns_id(7) == 3
    assert sent(rec.requests[0]) == compiled(batch, "get_netnsid", fd=7)


# ------------------------------------------------------------------ dumps and replies


def _ndmsg(family: int, index: int, state: int = 0, flags: int = 0) -> bytes:
    return struct.pack("=BxxxiHBB", family, index, state, flags, 0)


def _neigh_reply(index: int, dst: str | None, mac: str | None, state: int = 0x80) -> bytes:
    family = 10 if dst and ":" in dst else 2
    body = _ndmsg(family, index, state)
    if dst is not None:
        body += _rta(1, IP(dst).packed)
    if mac is not None:
        body += _rta(2, bytes.fromhex(mac.replace(":", "")))
    return body + _rta(4, struct.pack("=IIII", 0, 0, 0, 1))  # NDA_CACHEINFO: skipped


def _nsid_reply(nsid: int) -> bytes:
    return b"\0\0\0\0" + _rta(1, struct.pack("=i", nsid))


def test_neighbour_dump_asks_the_kernel_for_one_link_and_filters_again() -> None:
    replies = [
        (28, _neigh_reply(3, "10.72.0.9", "02:00:00:00:00:09")),
        (28, _neigh_reply(4, "10.72.0.8", "02:00:00:00:00:08")),  # another link (old kernel)
        (28, _neigh_reply(3, "10.72.0.7", None, state=0x20)),  # failed: no MAC
        (28, _neigh_reply(3, None, "02:00:00:00:00:06")),  # no address
        (28, _neigh_reply(3, "fd00::5", "02:00:00:00:00:05", state=0x02)),
    ]
    client, rec = _client(replies)
    assert client.neighbours(3, 2) == [
        Neighbour(3, IP("10.72.0.9"), "02:00:00:00:00:09", 0x80),
        Neighbour(3, IP("fd00::5"), "02:00:00:00:00:05", 0x02),
    ]
    ((kind, flags, body),) = rec.requests
    assert (kind, flags) == (30, wire.NLM_F_DUMP)  # RTM_GETNEIGH
    # iproute2's `ip neigh show dev`: the header's ifindex 0 (strict checking refuses any
    # other), the link in NDA_IFINDEX
    assert body == _ndmsg(2, 0) + _rta(8, struct.pack("=I", 3))


def test_fdb_dump_names_the_device_in_the_header_and_filters_again() -> None:
    replies = [
        (28, _ndmsg(7, 5, 0x80, 2) + _rta(2, bytes(range(1, 7))) + _rta(1, IP("10.0.0.2").packed)),
        (28, _ndmsg(7, 5, 0x80, 2) + _rta(2, bytes(6))),  # the all-zero default entry, no dst
        (28, _ndmsg(7, 6, 0x80, 2) + _rta(2, bytes(range(6)))),  # another device
        (28, _ndmsg(7, 5, 0x80, 2) + _rta(1, IP("10.0.0.3").packed)),  # no MAC
    ]
    client, rec = _client(replies)
    assert client.fdb_entries(5) == [
        FdbEntry(5, "01:02:03:04:05:06", IP("10.0.0.2")),
        FdbEntry(5, "00:00:00:00:00:00", None),
    ]
    ((kind, flags, body),) = rec.requests
    assert (kind, flags, body) == (30, wire.NLM_F_DUMP, _ndmsg(7, 5))


@pytest.mark.parametrize(("nsid", "expected"), [(0, 0), (12, 12), (-1, None)])
def test_netns_id_reply(nsid: int, expected: int | None) -> None:
    client, _ = _client([(c.RTM_NEWNSID, _nsid_reply(nsid))])
    assert client.netns_id(7) == expected


def test_netns_id_without_the_attribute_or_a_reply_is_none() -> None:
    client, _ = _client([(c.RTM_NEWNSID, b"\0\0\0\0")])
    assert client.netns_id(7) is None
    client, _ = _client([])
    assert client.netns_id(7) is None


def test_a_bad_mac_is_refused_before_sending() -> None:
    client, rec = _client()
    for bad in ("02:00:00:00:00", "zz:00:00:00:00:00", ""):
        with pytest.raises(ValueError):
            client.set_fdb(5, bad, IP("10.0.0.1"))
    with pytest.raises(ValueError):
        client.set_neighbour(3, IP("10.0.0.1"), "02-00-00-00-00-01")
    assert rec.requests == []


macs = st.binary(min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02x}" for x in b))


@given(address=st.ip_addresses(), mac=macs, index=st.integers(1, 2**31 - 1))
def test_neighbour_and_fdb_round_trip(address: IPAddress, mac: str, index: int) -> None:
    """What a request says, answered back as the kernel reports it, decodes to the record."""
    assert nd.decode_neighbour(nd.neighbour(index, address, mac)) == Neighbour(
        index, address, mac, 0x80
    )
    assert nd.decode_fdb(nd.fdb(index, mac, address)) == FdbEntry(index, mac, address)
