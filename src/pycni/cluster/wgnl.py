"""WireGuard's generic netlink family ("wireguard"), natively: set a device's key and port,
add, change and remove peers, read the peers back.

The wire format is the kernel's ``include/uapi/linux/wireguard.h``. Written here rather than
through pyroute2's WireGuard class so every message is built by code the unit tests can
check byte for byte (this machine's kernel has no wireguard module; the full-kernel lane
runs the real thing). One peer per SET request: a peer the kernel refuses costs only
itself, and no request comes near the netlink message size limit however many peers.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterator

from pycni.net.netlink.kernel import NetlinkError
from pycni.net.netlink.rtnl import wire
from pycni.record import field, record

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
GENLMSGHDR = struct.Struct("=BBH")  # cmd, version, reserved

FAMILY = "wireguard"
VERSION = 1
CMD_GET_DEVICE, CMD_SET_DEVICE = 0, 1
DEV_IFINDEX, DEV_IFNAME, DEV_PRIVATE_KEY, DEV_PUBLIC_KEY = 1, 2, 3, 4
DEV_FLAGS, DEV_LISTEN_PORT, DEV_FWMARK, DEV_PEERS = 5, 6, 7, 8
PEER_PUBLIC_KEY, PEER_PRESHARED_KEY, PEER_FLAGS, PEER_ENDPOINT = 1, 2, 3, 4
PEER_KEEPALIVE, PEER_ALLOWEDIPS = 5, 9
ALLOWEDIP_FAMILY, ALLOWEDIP_IPADDR, ALLOWEDIP_CIDR = 1, 2, 3
PEER_F_REMOVE_ME, PEER_F_REPLACE_ALLOWEDIPS = 0x1, 0x2

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class WireGuardError(RuntimeError):
    """The kernel has no WireGuard (module not loaded) refused a request, or
    answered something that cannot be decoded."""


@record(frozen=True)
class Peer:
    public_key: bytes
    endpoint: tuple[Address, int] | None = None
    allowed: tuple[Network, ...] = ()
    keepalive: int = 0


@record
class Device:
    public_key: bytes = b""
    listen_port: int = 0
    peers: dict[bytes, Peer] = field(default_factory=dict)


def _u16(kind: int, value: int) -> bytes:
    return wire.attr(kind, struct.pack("=H", value))


def _u8(kind: int, value: int) -> bytes:
    return wire.attr(kind, struct.pack("=B", value))


def sockaddr(address: Address, port: int) -> bytes:
    """``struct sockaddr_in`` / ``sockaddr_in6`` as the kernel reads WGPEER_A_ENDPOINT."""
    if address.version == 4:
        return (
            struct.pack("=H", socket.AF_INET) + struct.pack(">H", port) + address.packed + bytes(8)
        )
    return (
        struct.pack("=H", socket.AF_INET6)
        + struct.pack(">HI", port, 0)
        + address.packed
        + struct.pack("=I", 0)
    )


def _endpoint(raw: bytes) -> tuple[Address, int] | None:
    if len(raw) >= 8 and struct.unpack_from("=H", raw)[0] == socket.AF_INET:
        return ipaddress.IPv4Address(raw[4:8]), struct.unpack_from(">H", raw, 2)[0]
    if len(raw) >= 24 and struct.unpack_from("=H", raw)[0] == socket.AF_INET6:
        return ipaddress.IPv6Address(raw[8:24]), struct.unpack_from(">H", raw, 2)[0]
    return None


def _allowed(net: Network) -> bytes:
    family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    return wire.nested(
        0,
        [
            _u16(ALLOWEDIP_FAMILY, family),
            wire.attr(ALLOWEDIP_IPADDR, net.network_address.packed),
            _u8(ALLOWEDIP_CIDR, net.prefixlen),
        ],
    )


def peer_attr(peer: Peer, *, remove: bool = False) -> bytes:
    """One WGDEVICE_A_PEERS entry: set ``peer`` (its allowed IPs replaced), or remove it."""
    parts = [wire.attr(PEER_PUBLIC_KEY, peer.public_key)]
    if remove:
        parts.append(wire.attr_u32(PEER_FLAGS, PEER_F_REMOVE_ME))
        return wire.nested(0, parts)
    parts.append(wire.attr_u32(PEER_FLAGS, PEER_F_REPLACE_ALLOWEDIPS))
    if peer.endpoint is not None:
        parts.append(wire.attr(PEER_ENDPOINT, sockaddr(*peer.endpoint)))
    parts.append(_u16(PEER_KEEPALIVE, peer.keepalive))
    parts.append(wire.nested(PEER_ALLOWEDIPS, [_allowed(n) for n in peer.allowed]))
    return wire.nested(0, parts)


def set_device_body(
    ifindex: int,
    *,
    private_key: bytes | None = None,
    listen_port: int | None = None,
    peers: list[bytes] | None = None,
) -> bytes:
    """A WG_CMD_SET_DEVICE message body (after the genetlink header)."""
    parts = [wire.attr_u32(DEV_IFINDEX, ifindex)]
    if private_key is not None:
        parts.append(wire.attr(DEV_PRIVATE_KEY, private_key))
    if listen_port is not None:
        parts.append(_u16(DEV_LISTEN_PORT, listen_port))
    if peers:
        parts.append(wire.nested(DEV_PEERS, peers))
    return GENLMSGHDR.pack(CMD_SET_DEVICE, VERSION, 0) + b"".join(parts)


def _entries(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Every attribute of ``data`` in order (a nested list repeats its types)."""
    pos = 0
    while pos + wire.RTATTR.size <= len(data):
        length, kind = wire.RTATTR.unpack_from(data, pos)
        if length < wire.RTATTR.size:
            return
        yield kind & wire.NLA_TYPE_MASK, data[pos + wire.RTATTR.size : pos + length]
        pos += wire.align(length)


def _u16_of(raw: bytes, what: str) -> int:
    """A u16 attribute's value; WireGuardError (not struct.error) when it is too short."""
    if len(raw) < 2:
        raise WireGuardError(f"malformed WireGuard answer: {what} has {len(raw)} bytes, not 2")
    return int(struct.unpack_from("=H", raw)[0])


def _allowed_ip(raw: bytes, cidr: bytes) -> Network:
    """One allowed IP; WireGuardError (not ValueError) for a prefix the family cannot have."""
    address = ipaddress.ip_address(raw)
    if len(cidr) != 1 or cidr[0] > address.max_prefixlen:
        raise WireGuardError(
            f"malformed WireGuard answer: allowed IP {address} with prefix "
            f"{cidr.hex() or 'missing'} (IPv{address.version} has at most {address.max_prefixlen})"
        )
    return ipaddress.ip_network((address, cidr[0]), strict=False)


def _decode_peer(data: bytes) -> Peer | None:
    attrs = wire.parse_attrs(data, 0, len(data))
    key = attrs.get(PEER_PUBLIC_KEY)
    if key is None or len(key) != 32:
        return None
    endpoint = _endpoint(attrs[PEER_ENDPOINT]) if PEER_ENDPOINT in attrs else None
    keepalive = _u16_of(attrs.get(PEER_KEEPALIVE, b"\0\0"), "the keepalive interval")
    allowed: list[Network] = []
    for _kind, item in _entries(attrs.get(PEER_ALLOWEDIPS, b"")):
        a = wire.parse_attrs(item, 0, len(item))
        raw, cidr = a.get(ALLOWEDIP_IPADDR, b""), a.get(ALLOWEDIP_CIDR, b"")
        if len(raw) in (4, 16):
            allowed.append(_allowed_ip(raw, cidr))
    return Peer(key, endpoint, tuple(allowed), keepalive)


def decode_device(messages: list[bytes]) -> Device:
    """The device from the payloads of a WG_CMD_GET_DEVICE dump (a long peer list spans
    several messages; a peer's allowed IPs may continue in the next one). A malformed
    answer (a short attribute, a prefix longer than its family's) is a WireGuardError."""
    device = Device()
    for payload in messages:
        attrs = wire.parse_attrs(payload, GENLMSGHDR.size, len(payload))
        if DEV_PUBLIC_KEY in attrs:
            device.public_key = attrs[DEV_PUBLIC_KEY]
        if DEV_LISTEN_PORT in attrs:
            device.listen_port = _u16_of(attrs[DEV_LISTEN_PORT], "the listen port")
        for _kind, item in _entries(attrs.get(DEV_PEERS, b"")):
            peer = _decode_peer(item)
            if peer is None:
                continue
            before = device.peers.get(peer.public_key)
            if before is not None:
                peer = Peer(
                    peer.public_key,
                    peer.endpoint or before.endpoint,
                    before.allowed + peer.allowed,
                    peer.keepalive or before.keepalive,
                )
            device.peers[peer.public_key] = peer
    return device


class _GenericSocket(wire.Socket):
    """A NETLINK_GENERIC socket (the request/ack loop is rtnetlink's)."""

    def __init__(self) -> None:
        self.sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_GENERIC
        )
        self.sock.bind((0, 0))
        self._seq = 0


class Client:
    """WireGuard devices of the current network namespace."""

    def __init__(self) -> None:
        self._sock = _GenericSocket()
        try:
            self.family = self._resolve()
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _resolve(self) -> int:
        body = GENLMSGHDR.pack(CTRL_CMD_GETFAMILY, 1, 0) + wire.attr_str(
            CTRL_ATTR_FAMILY_NAME, FAMILY
        )
        try:
            replies = self._sock.request(GENL_ID_CTRL, 0, body)
        except NetlinkError as exc:
            raise WireGuardError(
                f"the kernel has no WireGuard (generic netlink family {FAMILY!r}: {exc}); "
                "load the wireguard module"
            ) from None
        for _kind, payload in replies:
            attrs = wire.parse_attrs(payload, GENLMSGHDR.size, len(payload))
            raw = attrs.get(CTRL_ATTR_FAMILY_ID)
            if raw is not None:
                return _u16_of(raw, "the family id")
        raise WireGuardError("the kernel did not say which id the wireguard family has")

    def set(
        self,
        ifindex: int,
        *,
        private_key: bytes | None = None,
        listen_port: int | None = None,
        peers: list[bytes] | None = None,
    ) -> None:
        body = set_device_body(
            ifindex, private_key=private_key, listen_port=listen_port, peers=peers
        )
        self._sock.request(self.family, wire.NLM_F_ACK, body)

    def set_peer(self, ifindex: int, peer: Peer) -> None:
        self.set(ifindex, peers=[peer_attr(peer)])

    def remove_peer(self, ifindex: int, public_key: bytes) -> None:
        self.set(ifindex, peers=[peer_attr(Peer(public_key), remove=True)])

    def device(self, ifindex: int) -> Device:
        body = GENLMSGHDR.pack(CMD_GET_DEVICE, VERSION, 0) + wire.attr_u32(DEV_IFINDEX, ifindex)
        replies = self._sock.request(self.family, wire.NLM_F_DUMP, body)
        return decode_device([payload for kind, payload in replies if kind == self.family])
