"""A DHCPv4 client on one pod interface: DISCOVER/OFFER/REQUEST/ACK, renew, rebind, release.

Transport: a raw ``AF_PACKET`` socket (``SOCK_DGRAM``, ethertype IPv4) bound to the pod
interface, as the reference's client does. Why not a UDP socket with SO_BINDTODEVICE: before
the lease is bound the interface has no address, and a server that answers the OFFER/ACK by
unicast to the offered address (dnsmasq and most servers do unless the broadcast flag is set)
would have its reply dropped by the IP stack; a packet socket sees the frame anyway. It also
needs no port 68 in the pod (nothing can clash with a DHCP client running there). We build the
IPv4 and UDP headers ourselves; the kernel adds the Ethernet header for the MAC we name.

A socket belongs to the namespace its creator thread was in, so the caller opens the
:class:`PacketSocket` inside the pod namespace and may use it from anywhere afterwards.
"""

from __future__ import annotations

import ipaddress
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from pycni.plugins.ipam.dhcp.message import (
    ACK,
    BOOTREPLY,
    BOOTREQUEST,
    DISCOVER,
    FLAG_BROADCAST,
    NAK,
    OFFER,
    OPT_CLIENT_ID,
    OPT_MESSAGE_TYPE,
    OPT_REQUESTED_IP,
    OPT_SERVER_ID,
    RELEASE,
    REQUEST,
    TYPE_NAMES,
    IPv4,
    Message,
    MessageError,
    new_xid,
)
from pycni.record import record

ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
BROADCAST_MAC = b"\xff" * 6
CLIENT_PORT, SERVER_PORT = 68, 67
ANY = IPv4(0)
BROADCAST = IPv4("255.255.255.255")

# Retry schedule (RFC 2131 §4.1, with the reference's fast first retries)
RESEND_FAST_DELAY = 2.0
RESEND_FAST_MAX = 4
RESEND_DELAY0 = 4.0


class DhcpError(Exception):
    """An exchange failed (timeout, NAK, malformed reply); the message says which."""


class Cancelled(DhcpError):
    """The lease was stopped while an exchange or its retry wait was running."""


@record
class ClientTuning:
    """The daemon's -timeout, -resendmax, -resendtimeout and -broadcast, in seconds."""

    timeout: float = 10.0
    resend_max: float = 62.0
    resend_timeout: float = 208.0
    broadcast: bool = False


@record
class Reply:
    """A server's answer and the link-layer address it came from."""

    message: Message
    source_mac: bytes


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_packet(payload: bytes, src: IPv4, dst: IPv4, sport: int, dport: int) -> bytes:
    """An IPv4 datagram carrying one UDP datagram, both checksums filled in."""
    length = 8 + len(payload)
    pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, socket.IPPROTO_UDP, length)
    udp = struct.pack("!HHHH", sport, dport, length, 0) + payload
    csum = _checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0x10, 20 + length, 0, 0, 64, socket.IPPROTO_UDP, 0, src.packed,
        dst.packed,
    )  # fmt: skip
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return header + udp


def udp_payload(packet: bytes, dport: int) -> bytes | None:
    """The UDP payload of an IPv4 packet to ``dport``; None for anything else."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_UDP:
        return None
    ihl = (packet[0] & 0xF) * 4
    if len(packet) < ihl + 8 or struct.unpack_from("!H", packet, 6)[0] & 0x3FFF:
        return None  # fragments are not DHCP replies we can use
    _sport, port, length, _ = struct.unpack_from("!HHHH", packet, ihl)
    if port != dport or length < 8:
        return None
    return packet[ihl + 8 : ihl + length]


class PacketSocket:
    """A packet socket on ``ifname`` of the namespace the calling thread is in."""

    def __init__(self, ifname: str) -> None:
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        try:
            self.sock.bind((ifname, ETH_P_IP))
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> PacketSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, msg: Message, src: IPv4, dst: IPv4, dst_mac: bytes) -> None:
        frame = udp_packet(msg.encode(), src, dst, CLIENT_PORT, SERVER_PORT)
        self.sock.sendto(frame, (self.ifname, ETH_P_IP, 0, 0, dst_mac))

    def receive(self, xid: int, deadline: float, cancel: threading.Event) -> Reply | None:
        """The next BOOTREPLY for ``xid`` before ``deadline`` (monotonic); None on timeout."""
        while not cancel.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], min(left, 0.25))
            if not ready:
                continue
            try:
                packet, addr = self.sock.recvfrom(4096)
            except BlockingIOError:
                continue
            if addr[2] == PACKET_OUTGOING:
                continue
            payload = udp_payload(packet, CLIENT_PORT)
            if payload is None:
                continue
            try:
                msg = Message.decode(payload)
            except MessageError:
                continue
            if msg.op == BOOTREPLY and msg.xid == xid:
                return Reply(msg, bytes(addr[4][:6]))
        raise Cancelled("cancelled")


class DhcpClient:
    """The exchanges of one lease; every packet carries the client ID and the extra options."""

    def __init__(
        self,
        mac: bytes,
        client_id: str,
        extra_options: dict[int, bytes],
        tuning: ClientTuning,
        cancel: threading.Event | None = None,
        sleep: Callable[[float], bool] | None = None,
    ) -> None:
        self.mac = mac
        self.client_id = client_id
        self.extra = extra_options
        self.tuning = tuning
        self.cancel = cancel or threading.Event()
        self._sleep = sleep or self.cancel.wait  # returns True when cancelled

    def _message(self, kind: int, xid: int, ciaddr: IPv4 = ANY) -> Message:
        msg = Message(
            op=BOOTREQUEST,
            xid=xid,
            chaddr=self.mac,
            ciaddr=ciaddr,
            flags=FLAG_BROADCAST if self.tuning.broadcast else 0,
        )
        msg.options[OPT_MESSAGE_TYPE] = bytes((kind,))
        msg.options[OPT_CLIENT_ID] = b"\0" + self.client_id.encode()
        msg.options.update(self.extra)
        return msg

    def _exchange(
        self, sock: PacketSocket, msg: Message, dst: IPv4, dst_mac: bytes, want: int
    ) -> Reply:
        src = msg.ciaddr
        sock.send(msg, src, dst, dst_mac)
        deadline = time.monotonic() + self.tuning.timeout
        while True:
            reply = sock.receive(msg.xid, deadline, self.cancel)
            if reply is None:
                raise DhcpError(
                    f"timed out waiting for {TYPE_NAMES[want]} on {sock.ifname} "
                    f"after {self.tuning.timeout:g}s"
                )
            kind = reply.message.type
            if kind == NAK:
                raise DhcpError(f"server answered {TYPE_NAMES[msg.type]} with DHCPNAK")
            if kind == want:
                return reply

    def discover_request(self, sock: PacketSocket) -> Reply:
        """One DORA round: the ACK (broadcast, from 0.0.0.0)."""
        xid = new_xid()
        offer = self._exchange(sock, self._message(DISCOVER, xid), BROADCAST, BROADCAST_MAC, OFFER)
        request = self._message(REQUEST, xid)
        request.options[OPT_REQUESTED_IP] = offer.message.yiaddr.packed
        server = offer.message.server_id
        if server is not None:
            request.options[OPT_SERVER_ID] = server.packed
        return self._exchange(sock, request, BROADCAST, BROADCAST_MAC, ACK)

    def renew(self, sock: PacketSocket, ack: Reply) -> Reply:
        """RENEWING: a REQUEST from our address, unicast to the server that granted it."""
        server = ack.message.server_id or BROADCAST
        mac = ack.source_mac if server != BROADCAST else BROADCAST_MAC
        msg = self._message(REQUEST, new_xid(), ciaddr=ack.message.yiaddr)
        return self._exchange(sock, msg, server, mac, ACK)

    def release(self, sock: PacketSocket, ack: Reply) -> None:
        """DHCPRELEASE to the server (no answer is expected)."""
        server = ack.message.server_id or BROADCAST
        mac = ack.source_mac if server != BROADCAST else BROADCAST_MAC
        msg = self._message(RELEASE, new_xid(), ciaddr=ack.message.yiaddr)
        if ack.message.server_id is not None:
            msg.options[OPT_SERVER_ID] = ack.message.server_id.packed
        sock.send(msg, ack.message.yiaddr, server, mac)

    def with_backoff(self, attempt: Callable[[], Reply], log: Callable[[str], None]) -> Reply:
        """Retry ``attempt`` on the reference's schedule until resend_timeout has passed."""
        give_up = time.monotonic() + self.tuning.resend_timeout
        delay = RESEND_DELAY0
        fast = RESEND_FAST_MAX
        while True:
            try:
                return attempt()
            except Cancelled:
                raise
            except (DhcpError, OSError) as exc:
                last = exc
            if fast:
                wait = RESEND_FAST_DELAY + random.uniform(-1.0, 1.0)
                fast -= 1
            else:
                wait = delay + random.uniform(-1.0, 1.0)
            if time.monotonic() + wait > give_up:
                raise DhcpError(f"no more tries: {last}") from None
            log(f"{last}; retrying in {wait:.1f} seconds")
            if self._sleep(wait):
                raise Cancelled("cancelled")
            if not fast and delay < self.tuning.resend_max:
                delay = min(delay * 2, self.tuning.resend_max)


def network_of(ack: Message) -> ipaddress.IPv4Interface:
    """The leased address with the ACK's subnet mask (an ACK without a mask is an error)."""
    mask = ack.subnet_mask
    if mask is None:
        raise DhcpError("DHCP option Subnet Mask not found in DHCPACK")
    return ipaddress.IPv4Interface(f"{ack.yiaddr}/{mask}")
