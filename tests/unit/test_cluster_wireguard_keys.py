"""WireGuard keys and messages without a WireGuard kernel: X25519 against RFC 7748 and
openssl, the node's key file (0600, never through a symlink, refused when others can read
it), the generic netlink messages byte for byte and their decoding, and which wireguard
leases the agent accepts."""

from __future__ import annotations

import base64
import ipaddress
import os
import socket
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.cluster import subnet as sn
from pycni.cluster import validate, wgkey, wgnl
from pycni.cluster.lease import LeaseInfo
from pycni.net.netlink.rtnl import wire

RFC_ALICE = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"
RFC_ALICE_PUB = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
RFC_BOB = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"
RFC_BOB_PUB = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
RFC_SHARED = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"


def test_x25519_rfc7748_vectors() -> None:
    alice, bob = bytes.fromhex(RFC_ALICE), bytes.fromhex(RFC_BOB)
    assert wgkey.public_key(alice).hex() == RFC_ALICE_PUB
    assert wgkey.public_key(bob).hex() == RFC_BOB_PUB
    assert wgkey.x25519(alice, bytes.fromhex(RFC_BOB_PUB)).hex() == RFC_SHARED
    assert wgkey.x25519(bob, bytes.fromhex(RFC_ALICE_PUB)).hex() == RFC_SHARED
    # RFC 7748 5.2, first vector
    scalar = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    u = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    expected = "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
    assert wgkey.x25519(scalar, u).hex() == expected


def test_public_keys_match_openssl(tmp_path: Path) -> None:
    for i in range(3):
        pem = tmp_path / f"k{i}.pem"
        subprocess.run(["openssl", "genpkey", "-algorithm", "X25519", "-out", str(pem)], check=True)
        private = subprocess.run(
            ["openssl", "pkey", "-in", str(pem), "-outform", "DER"], capture_output=True, check=True
        ).stdout[-32:]
        public = subprocess.run(
            ["openssl", "pkey", "-in", str(pem), "-pubout", "-outform", "DER"],
            capture_output=True,
            check=True,
        ).stdout[-32:]
        assert wgkey.public_key(private) == public


def test_generated_keys_are_clamped_and_distinct() -> None:
    keys = {wgkey.generate() for _ in range(20)}
    assert len(keys) == 20
    for key in keys:
        assert key[0] & 7 == 0 and key[31] & 0x80 == 0 and key[31] & 0x40


def test_key_file_is_made_0600_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "run" / "wgkey"
    key = wgkey.load_or_create(str(path))
    assert (path.stat().st_mode & 0o777) == 0o600
    assert wgkey.decode(path.read_text()) == key
    assert wgkey.load_or_create(str(path)) == key  # a restart keeps the node's key


def test_key_file_refusals(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text(wgkey.encode(wgkey.generate()))
    target.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(wgkey.WgKeyError, match="cannot open"):
        wgkey.load_or_create(str(link))
    readable = tmp_path / "readable"
    readable.write_text(wgkey.encode(wgkey.generate()))
    readable.chmod(0o644)
    with pytest.raises(wgkey.WgKeyError, match="readable by it alone"):
        wgkey.load_or_create(str(readable))
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key")
    garbage.chmod(0o600)
    with pytest.raises(wgkey.WgKeyError, match="does not hold a WireGuard private key"):
        wgkey.load_or_create(str(garbage))
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    with pytest.raises(wgkey.WgKeyError):
        wgkey.load_or_create(str(directory))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nothing")
    with pytest.raises(wgkey.WgKeyError):
        wgkey.load_or_create(str(dangling))
    assert not (tmp_path / "nothing").exists()  # never created through the link


def test_sockaddr_layout() -> None:
    v4 = wgnl.sockaddr(ipaddress.IPv4Address("10.99.0.12"), 51820)
    assert v4 == struct.pack("=H", socket.AF_INET) + bytes([0xCA, 0x6C, 10, 99, 0, 12]) + bytes(8)
    v6 = wgnl.sockaddr(ipaddress.IPv6Address("fd99::12"), 51821)
    assert len(v6) == 28 and v6[2:4] == (51821).to_bytes(2, "big")
    assert v6[8:24] == ipaddress.IPv6Address("fd99::12").packed


def _reply(body: bytes) -> bytes:
    """A GET_DEVICE answer's payload made of a SET message's attributes (the same layout)."""
    return body


KEY = bytes(range(32))


def test_set_message_round_trips_through_the_decoder() -> None:
    peer = wgnl.Peer(
        KEY,
        (ipaddress.IPv4Address("10.99.0.12"), 51820),
        (ipaddress.IPv4Network("10.244.7.0/24"),),
        25,
    )
    body = wgnl.set_device_body(
        7, private_key=b"\1" * 32, listen_port=51820, peers=[wgnl.peer_attr(peer)]
    )
    cmd, version, _ = wgnl.GENLMSGHDR.unpack_from(body)
    assert (cmd, version) == (wgnl.CMD_SET_DEVICE, 1)
    attrs = wire.parse_attrs(body, wgnl.GENLMSGHDR.size, len(body))
    assert struct.unpack("=I", attrs[wgnl.DEV_IFINDEX])[0] == 7
    assert struct.unpack("=H", attrs[wgnl.DEV_LISTEN_PORT][:2])[0] == 51820
    device = wgnl.decode_device([_reply(body)])
    assert device.listen_port == 51820
    assert device.peers == {KEY: peer}
    removal = wgnl.set_device_body(7, peers=[wgnl.peer_attr(wgnl.Peer(KEY), remove=True)])
    peers = wire.parse_attrs(removal, wgnl.GENLMSGHDR.size, len(removal))[wgnl.DEV_PEERS]
    entry = wire.parse_attrs(peers, wire.RTATTR.size, len(peers))
    assert struct.unpack("=I", entry[wgnl.PEER_FLAGS])[0] == wgnl.PEER_F_REMOVE_ME
    assert wgnl.PEER_ALLOWEDIPS not in entry


def test_a_peer_split_over_two_dump_messages_is_one_peer() -> None:
    first = wgnl.Peer(KEY, (ipaddress.IPv6Address("fd99::12"), 51821),
                      (ipaddress.IPv6Network("fd10:244:0:7::/64"),), 0)  # fmt: skip
    second = wgnl.Peer(KEY, None, (ipaddress.IPv6Network("fd10:244:0:8::/64"),), 0)
    messages = [wgnl.set_device_body(1, peers=[wgnl.peer_attr(p)]) for p in (first, second)]
    device = wgnl.decode_device(messages)
    assert device.peers[KEY].allowed == first.allowed + second.allowed
    assert device.peers[KEY].endpoint == first.endpoint


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_the_decoder_survives_any_bytes(data: bytes) -> None:
    wgnl.decode_device([bytes(4) + data])


def _info(**data: object) -> LeaseInfo:
    return LeaseInfo(ipaddress.IPv4Address("10.99.0.12"), "wireguard", dict(data))


def _view() -> validate.NodeView:
    return validate.NodeView(
        network=sn.NetworkConfig.parse("10.244.0.0/16", 24),
        own=ipaddress.IPv4Network("10.244.5.0/24"),
        backend_type="wireguard",
        public_ip=ipaddress.IPv4Address("10.99.0.11"),
        underlay_networks=(ipaddress.IPv4Network("10.99.0.0/24"),),
    )


GOOD_KEY = base64.b64encode(os.urandom(32)).decode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"PublicKey": GOOD_KEY}, None),  # flannel's: no ListenPort, ours is used
        ({"PublicKey": GOOD_KEY, "ListenPort": 51820}, None),
        ({}, "is not a WireGuard key"),
        ({"PublicKey": "short"}, "is not a WireGuard key"),
        ({"PublicKey": base64.b64encode(bytes(31)).decode()}, "is not a WireGuard key"),
        ({"PublicKey": 7}, "is not a WireGuard key"),
        ({"PublicKey": GOOD_KEY, "ListenPort": 0}, "is not a UDP port"),
        ({"PublicKey": GOOD_KEY, "ListenPort": 70000}, "is not a UDP port"),
        ({"PublicKey": GOOD_KEY, "ListenPort": "51820"}, "is not a UDP port"),
        ({"PublicKey": GOOD_KEY, "ListenPort": True}, "is not a UDP port"),
    ],
)
def test_which_wireguard_leases_are_used(data: dict[str, object], problem: str | None) -> None:
    found = validate.lease_problem(ipaddress.IPv4Network("10.244.9.0/24"), _info(**data), _view())
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_a_copied_public_key_is_refused_the_older_keeps_it() -> None:
    from pycni.cluster.backend import Underlay
    from pycni.cluster.wireguard import WireGuard

    backend = WireGuard(
        Underlay("eth0", 2, ipaddress.IPv4Address("10.99.0.11"), 1500), wgkey.generate()
    )
    assert backend.pod_mtu() == 1440 and backend.port == 51820
    own = backend.claims(LeaseInfo(ipaddress.IPv4Address("10.99.0.11"), "wireguard",
                                   backend.backend_data()))  # fmt: skip
    a, b = ipaddress.IPv4Network("10.244.2.0/24"), ipaddress.IPv4Network("10.244.3.0/24")
    remotes = {a: _info(PublicKey=GOOD_KEY), b: _info(PublicKey=GOOD_KEY)}
    kept, refused = validate.exclusive(remotes, {a: 5, b: 9}, backend.claims, own)
    assert set(kept) == {a} and "older lease 10.244.2.0/24" in refused[b]
    mine = {b: _info(**backend.backend_data())}
    assert "this node's own" in validate.exclusive(mine, {}, backend.claims, own)[1][b]
    v6 = WireGuard(Underlay("eth0", 2, ipaddress.IPv6Address("fd99::11"), 1500), wgkey.generate())
    assert v6.pod_mtu() == 1420 and v6.port == 51821 and v6.name == "pycni-wg-v6"
