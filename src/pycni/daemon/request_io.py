"""Non-blocking request reads and reply writes on the daemon's connections, and its waker.

Everything here runs on the daemon's main thread, driven by its selector: a slow client
costs a registered fd, never a worker.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

from pycni.daemon import protocol
from pycni.daemon.protocol import Request

_CHUNK = 1 << 20


class RequestReader:
    """Accumulates one request from a non-blocking socket; owns the fds until it is done."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._fds: list[int] = []
        self._prefix: protocol.RequestPrefix | None = None
        self._space = socket.CMSG_SPACE(4 * (protocol.MAX_FDS + 1))

    @property
    def received(self) -> int:
        return len(self._buf)

    def _need(self) -> int:
        if self._prefix is None:
            return protocol.REQUEST_PREFIX.size
        return protocol.REQUEST_PREFIX.size + self._prefix.head_len + self._prefix.body_len

    def feed(self, conn: socket.socket) -> Request | None:
        """Read what is there; the Request once complete, None while more is expected.

        Raises CNIError (code 6) on a malformed request and ConnectionError when the client
        closed mid-request.
        """
        while True:
            need = self._need()
            if len(self._buf) >= need:
                if self._prefix is None:
                    self._prefix = protocol.parse_request_prefix(bytes(self._buf[:need]))
                    continue
                return self._build()
            try:
                data, ancdata, msg_flags, _ = conn.recvmsg(
                    min(need - len(self._buf), _CHUNK), self._space, socket.MSG_DONTWAIT
                )
            except (BlockingIOError, InterruptedError):
                return None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(payload) - len(payload) % 4
                    self._fds.extend(struct.unpack(f"{usable // 4}i", payload[:usable]))
            if msg_flags & socket.MSG_CTRUNC:
                raise protocol.malformed("too many fds attached")
            if len(self._fds) > protocol.MAX_FDS:
                raise protocol.malformed(f"{len(self._fds)} fds attached, at most 2 allowed")
            if not data:
                raise ConnectionError(f"client closed after {len(self._buf)} of {need} bytes")
            self._buf += data

    def _build(self) -> Request:
        prefix = self._prefix
        assert prefix is not None
        if len(self._fds) != prefix.fd_count:
            raise protocol.malformed(
                f"{len(self._fds)} fds attached, flags announce {prefix.fd_count}"
            )
        start = protocol.REQUEST_PREFIX.size
        head = bytes(self._buf[start : start + prefix.head_len])
        req = Request(prefix.kind)
        if prefix.kind == protocol.KIND_CALL:
            req.plugin_type, req.env = protocol.parse_call_head(head)
            req.stdin = bytes(self._buf[start + prefix.head_len :])
            fds = list(self._fds)
            if prefix.flags & protocol.FLAG_CALLER_NETNS:
                req.caller_netns_fd = fds.pop(0)
            if prefix.flags & protocol.FLAG_TARGET_NETNS:
                req.target_netns_fd = fds.pop(0)
        self._fds.clear()  # handed over to the Request
        self._buf = bytearray()
        self._prefix = None  # a HELLO is followed by the request itself
        return req

    def close(self) -> None:
        """Close fds not handed over (on error or when the client went away)."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


class ReplyWriter:
    """One encoded reply, written as far as a non-blocking socket takes it."""

    def __init__(self, reply: protocol.Reply) -> None:
        self._data = memoryview(protocol.encode_reply(reply))

    def write(self, conn: socket.socket) -> bool:
        """True once everything is sent; OSError when the client is gone."""
        while self._data:
            try:
                sent = conn.send(self._data, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return False
            self._data = self._data[sent:]
        return True


def peer_hung_up(conn: socket.socket) -> bool | None:
    """For a connection whose request is complete: True when the caller closed it, False when
    it sent more (a protocol violation), None when nothing happened."""
    try:
        data = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return True
    return not data


class Waker:
    """A socket pair that wakes the main loop's select() from any thread or a signal handler."""

    def __init__(self) -> None:
        self.fileobj, self._w = socket.socketpair()
        self.fileobj.setblocking(False)
        self._w.setblocking(False)

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._w.send(b"x")

    def write_fd(self) -> int:
        """The writing end, for ``signal.set_wakeup_fd``."""
        return self._w.fileno()

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            self.fileobj.recv(4096)
