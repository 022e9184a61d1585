"""Netlink framing: build attributes, send one request, collect the replies or the error."""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (benchmarks.md)
import contextlib
import errno
import struct
from collections.abc import Iterable, Iterator

from pycni.net.netlink.kernel import NetlinkError

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_GET_STRICT_CHK = 12

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_ECHO = 0x8
NLM_F_DUMP = 0x300
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_DUMP_INTR = 0x10  # on a dump's reply: the objects changed while it was being read
DUMP_TRIES = 5  # reads of an interrupted dump before giving up (Go's netlinksafe: 5 too)

NLMSG_ERROR = 2
NLMSG_DONE = 3

NLMSGHDR = struct.Struct("=IHHII")
RTATTR = struct.Struct("=HH")
_RTATTR_UNPACK = RTATTR.unpack_from
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF
_ERRNO = struct.Struct("=i")
_RECV_SIZE = 1 << 17


RtnlError = NetlinkError  # the name this module used before the kernel boundary existed


def align(n: int) -> int:
    return (n + 3) & ~3


def flagged_messages(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, sequence number, payload) of each netlink message in one buffer."""
    offset = 0
    while offset + NLMSGHDR.size <= len(data):
        length, mtype, mflags, mseq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size:
            raise NetlinkError(71, "netlink: truncated message")  # EPROTO
        yield mtype, mflags, mseq, data[offset + NLMSGHDR.size : offset + length]
        offset += align(length)


def messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, sequence number, payload) of each netlink message in one received buffer."""
    for mtype, _flags, mseq, payload in flagged_messages(data):
        yield mtype, mseq, payload


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = RTATTR.size + len(payload)
    return RTATTR.pack(length, kind) + payload + b"\0" * (align(length) - length)


def attr_u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def attr_str(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


def nested(kind: int, parts: Iterable[bytes]) -> bytes:
    return attr(kind | NLA_F_NESTED, b"".join(parts))


def parse_attrs(data: bytes, start: int, end: int) -> dict[int, bytes]:
    """The attributes in ``data[start:end]`` by type (the first of each type wins).

    Hot: every link, address and route reply goes through it (a bridge's link message has
    ~40 attributes). The 4-byte alignment is inlined and the unpack and setdefault are bound
    locally rather than called per attribute: 17 -> 12 us on a 1.5 kB link message."""
    found: dict[int, bytes] = {}
    keep = found.setdefault  # keeps the first of a type, as the kernel's nla_find
    unpack = _RTATTR_UNPACK
    pos = start
    last = min(end, len(data)) - 4  # the last offset an attribute header fits at
    while pos <= last:
        length, kind = unpack(data, pos)
        if length < 4:  # a bogus length: stop rather than loop or read garbage
            break
        keep(kind & NLA_TYPE_MASK, data[pos + 4 : pos + length])
        pos += (length + 3) & ~3
    return found


class Socket:
    """A NETLINK_ROUTE socket; it belongs to the namespace of the thread that made it."""

    def __init__(self) -> None:
        self.sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE
        )
        # lets the kernel filter dumps (addresses of one link) instead of sending them all
        with contextlib.suppress(OSError):
            self.sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
        self.sock.bind((0, 0))
        self._seq = 0
        self.interrupted_dumps = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def request(self, kind: int, flags: int, body: bytes) -> list[tuple[int, bytes]]:
        """Send one message and return the (type, payload) replies until the ack, the end of
        a dump, or the single answer of a get; an error reply raises NetlinkError.

        A dump spans several reads, and the kernel flags its replies NLM_F_DUMP_INTR when
        the objects changed in between (a busy node adding and removing pods): such a dump
        may miss or repeat objects, so it is read again, up to DUMP_TRIES times in all, then
        NetlinkError(EINTR) says so. ``interrupted_dumps`` counts the repeated reads."""
        for _ in range(DUMP_TRIES):
            out, interrupted = self._exchange(kind, flags, body)
            if not interrupted:
                return out
            self.interrupted_dumps += 1
        raise NetlinkError(
            errno.EINTR,
            f"netlink dump interrupted by concurrent changes {DUMP_TRIES} times in a row "
            "(the kernel's objects kept changing while they were listed); try again",
        )

    def _recv(self) -> bytes:
        return self.sock.recv(_RECV_SIZE)

    def _exchange(self, kind: int, flags: int, body: bytes) -> tuple[list[tuple[int, bytes]], bool]:
        """One request and its replies; and whether the kernel flagged the dump interrupted."""
        self._seq = seq = (self._seq + 1) & 0xFFFFFFFF
        flags |= NLM_F_REQUEST
        self.sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags, seq, 0) + body)
        dump = flags & NLM_F_DUMP == NLM_F_DUMP
        acked = bool(flags & NLM_F_ACK)
        out: list[tuple[int, bytes]] = []
        interrupted = False
        while True:
            for mtype, mflags, mseq, payload in flagged_messages(self._recv()):
                if mseq != seq:
                    continue  # a late answer to an earlier request: not ours any more
                interrupted |= dump and bool(mflags & NLM_F_DUMP_INTR)
                if mtype == NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(payload, 0)
                    if code:
                        raise NetlinkError(-code)
                    return out, interrupted
                if mtype == NLMSG_DONE:
                    if len(payload) >= 4:
                        (code,) = _ERRNO.unpack_from(payload, 0)
                        if code:
                            raise NetlinkError(-code)
                    return out, interrupted
                out.append((mtype, payload))
                if not dump and not acked:
                    return out, interrupted
