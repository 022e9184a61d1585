"""Issue 32 items 2, 8 and 10: one spelling per claimed value, a key file that cannot hang
or be left empty, and netlink answers that decode to a clean error.

- A WireGuard key has 8 base64 spellings (whitespace, the two unused low bits of the last
  character); a VtepMAC passed the check with a trailing newline. Only the canonical
  spelling is accepted, and claims compare decoded bytes whatever the spelling.
- The key file is opened with O_NONBLOCK (a FIFO there failed start instead of hanging it)
  and made by linking a written temp file into place (an empty file left by a kill is
  replaced, never refused forever).
- ``wgnl.decode_device`` raises WireGuardError for a short attribute or an impossible
  prefix; a MAC the encoder refuses (ValueError) costs its peer only.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pycni.cluster import subnet as sn
from pycni.cluster import validate, wgkey, wgnl
from pycni.cluster.backend import Applied, Underlay, guarded
from pycni.cluster.lease import BadLease, LeaseInfo
from pycni.cluster.vxlan import Vxlan
from pycni.cluster.wireguard import WireGuard
from pycni.net.netlink.rtnl import codec, wire

KEY = wgkey.encode(wgkey.public_key(wgkey.generate()))
MAC = "02:42:ac:11:00:02"
UNDERLAY = Underlay("eth0", 2, ipaddress.IPv4Address("10.99.0.11"), 1500)
A, B = ipaddress.IPv4Network("10.244.2.0/24"), ipaddress.IPv4Network("10.244.3.0/24")


def _aliases(key: str) -> list[str]:
    """Other strings that base64-decode (as ``wgkey.decode`` does) to ``key``'s bytes."""
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    index = last.index(key[-2]) & ~3
    low_bits = [key[:-2] + last[index + n] + "=" for n in range(4) if last[index + n] != key[-2]]
    return [*low_bits, key + " ", " " + key, key + "\n", "\t" + key]


def _view(backend: str) -> validate.NodeView:
    return validate.NodeView(
        network=sn.NetworkConfig.parse("10.244.0.0/16"),
        own=ipaddress.IPv4Network("10.244.1.0/24"),
        backend_type=backend,
        public_ip=ipaddress.IPv4Address("10.99.0.11"),
        underlay_networks=(ipaddress.IPv4Network("10.99.0.0/24"),),
        vni=1 if backend == "vxlan" else None,
    )


def _lease(backend: str, **data: object) -> LeaseInfo:
    return LeaseInfo(ipaddress.IPv4Address("10.99.0.12"), backend, dict(data))


def test_every_alias_of_a_wireguard_key_is_one_claim_and_refused() -> None:
    aliases = _aliases(KEY)
    assert len(aliases) == 7
    backend = WireGuard(UNDERLAY, wgkey.generate())
    assert validate.lease_problem(B, _lease("wireguard", PublicKey=KEY), _view("wireguard")) is None
    for alias in aliases:
        assert wgkey.decode(alias) == wgkey.decode(KEY)  # what made the alias dangerous
        problem = validate.lease_problem(
            B, _lease("wireguard", PublicKey=alias), _view("wireguard")
        )
        assert problem is not None and "canonical" in problem, alias
        # the claim is the key's bytes: the live node's lease keeps it
        remotes = {A: _lease("wireguard", PublicKey=KEY), B: _lease("wireguard", PublicKey=alias)}
        kept, refused = validate.exclusive(remotes, {A: 5, B: 9}, backend.claims, set())
        assert set(kept) == {A} and "older lease 10.244.2.0/24" in refused[B], alias


def test_a_vtep_mac_is_accepted_in_its_canonical_spelling_only() -> None:
    view = _view("vxlan")
    assert validate.lease_problem(B, _lease("vxlan", VNI=1, VtepMAC=MAC), view) is None
    for alias in (MAC + "\n", MAC.upper(), " " + MAC, MAC + " ", "2:42:ac:11:0:2"):
        problem = validate.lease_problem(B, _lease("vxlan", VNI=1, VtepMAC=alias), view)
        assert problem is not None and "is not a MAC address" in problem, repr(alias)
    backend = Vxlan(UNDERLAY)
    for alias in (MAC + "\n", MAC.upper(), "2:42:ac:11:0:2"):
        remotes = {A: _lease("vxlan", VNI=1, VtepMAC=MAC), B: _lease("vxlan", VNI=1, VtepMAC=alias)}
        kept, _refused = validate.exclusive(remotes, {A: 5, B: 9}, backend.claims, set())
        assert set(kept) == {A}, repr(alias)


@pytest.mark.parametrize("spelling", ["10.99.0.012", "FD99::12", "fd99:0::12", "fd99::0.0.0.18"])
def test_a_public_ip_is_accepted_in_its_canonical_spelling_only(spelling: str) -> None:
    raw = f'{{"PublicIP": "{spelling}", "BackendType": "vxlan"}}'.encode()
    try:
        address = ipaddress.ip_address(spelling)
    except ValueError:
        address = None
    with pytest.raises(BadLease, match="PublicIP"):
        LeaseInfo.parse(raw)
    if address is not None:
        assert LeaseInfo.parse(raw.replace(spelling.encode(), str(address).encode())).public_ip == (
            address
        )


def test_a_fifo_where_the_key_file_goes_fails_start_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "wgkey"
    os.mkfifo(fifo, 0o600)
    script = (
        "import sys\nfrom pycni.cluster import wgkey\n"
        "try:\n    wgkey.load_or_create(sys.argv[1])\nexcept wgkey.WgKeyError as e:\n"
        "    print(e)\n"
    )
    # a child, so the old blocking open would hang it and not this test run
    done = subprocess.run(
        [sys.executable, "-c", script, str(fifo)], capture_output=True, text=True, timeout=20
    )
    assert "is not a regular file" in done.stdout, done.stdout + done.stderr


def test_the_key_file_is_linked_into_place_and_an_empty_one_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "flannel" / "wgkey"
    key = wgkey.load_or_create(str(path))
    assert wgkey.decode(path.read_text()) == key
    assert sorted(os.listdir(path.parent)) == ["wgkey"]  # no temp file left
    assert os.stat(path).st_mode & 0o777 == 0o600
    # an empty 0600 file: what a kill between create and write left before
    path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    again = wgkey.load_or_create(str(path))
    assert wgkey.decode(path.read_text()) == again and again != key
    assert sorted(os.listdir(path.parent)) == ["wgkey"]


def test_the_key_file_is_never_present_and_empty(tmp_path: Path) -> None:
    """The file's content is written before its name exists: a writer is killed at every
    step here and whoever finds the name finds a key."""
    path = tmp_path / "wgkey"
    script = (
        "import os, sys\nfrom pycni.cluster import wgkey\n"
        "real = os.write\n"
        "def dying(fd, data):\n    os._exit(9)\n"
        "os.write = dying\nwgkey.load_or_create(sys.argv[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], timeout=20, check=False)
    assert done.returncode == 9
    assert not path.exists()  # killed before the write: no key file, so the next start makes one
    key = wgkey.load_or_create(str(path))
    assert wgkey.decode(path.read_text()) == key


def _device(*attrs: bytes) -> bytes:
    return wgnl.GENLMSGHDR.pack(0, 1, 0) + b"".join(attrs)


def _peer(*extra: bytes) -> bytes:
    return wire.nested(wgnl.DEV_PEERS, [wire.nested(0, [wire.attr(1, bytes(32)), *extra])])


def _allowed(address: bytes, cidr: int) -> bytes:
    entry = wire.nested(
        0,
        [
            wire.attr(1, struct.pack("=H", socket.AF_INET)),
            wire.attr(2, address),
            wire.attr(3, struct.pack("=B", cidr)),
        ],
    )
    return wire.nested(wgnl.PEER_ALLOWEDIPS, [entry])


@pytest.mark.parametrize(
    "payload",
    [
        _device(wire.attr(wgnl.DEV_LISTEN_PORT, b"\x01")),  # a u16 of one byte
        _device(_peer(wire.attr(5, b"\x01"))),  # the keepalive, short
        _device(_peer(_allowed(bytes(4), 33))),  # an IPv4 prefix of 33
        _device(_peer(_allowed(bytes(4), 255))),
    ],
    ids=["short-port", "short-keepalive", "prefix-33", "prefix-255"],
)
def test_a_malformed_wireguard_answer_is_a_clean_error(payload: bytes) -> None:
    with pytest.raises(wgnl.WireGuardError, match="malformed WireGuard answer"):
        wgnl.decode_device([payload])


def test_a_value_the_encoder_refuses_costs_its_peer_only() -> None:
    applied = Applied()

    def step() -> None:
        codec.mac_bytes("zz:zz:zz:zz:zz:zz")

    assert guarded(applied, B, step, "the neighbor entry") is False
    assert B in applied.failed and "cannot encode the neighbor entry" in applied.failed[B]
