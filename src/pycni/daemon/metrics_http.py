"""The metrics endpoint's HTTP server: one thread, a connection cap, a deadline per connection.

Anyone who can reach the endpoint (every local user, for a loopback TCP port) can open
connections and keep them idle. A thread per connection (http.server's ThreadingMixIn) let
them hold as many threads and fds as they liked, until the daemon's own accept() failed with
EMFILE and CNI calls stalled. Here one thread serves every connection from a selector:

- at most ``max_connections`` are open; a new one beyond that closes the oldest that has
  sent nothing yet (else the oldest), so the endpoint holds at most ``max_connections + 1``
  fds whatever callers do, and a scraper is served even while someone opens idle ones;
- each connection has ``deadline`` seconds from accept to read its request and take the whole
  answer, then it is closed;
- a request is at most ``MAX_REQUEST`` bytes; only GET and HEAD are answered;
- accept() failing with EMFILE/ENFILE pauses the listener for a moment (no busy loop);
- answers are paced: at most one per ``min_interval`` seconds (``MAX_ANSWERS`` a second),
  in the order the requests arrived. Scrapers fetching in a loop then spend their time
  waiting for an answer instead of taking the node's CPU (and this thread's share of the
  interpreter) from the calls; Prometheus scrapes every few seconds and never notices.

The answer is the Prometheus text format of the registry, from ``render`` on this thread
(metrics.SharedRender: rendered at most once a second).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import selectors
import socket
import threading
import time
from collections.abc import Callable

MAX_CONNECTIONS = 16
DEADLINE = 5.0  # seconds from accept to the last byte of the answer
MAX_REQUEST = 8192
ACCEPT_PAUSE = 0.5  # after EMFILE/ENFILE
MAX_ANSWERS = 20  # a second, whoever asks
_CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class _Conn:
    __slots__ = ("deadline", "inbox", "outbox", "sock", "waiting")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.inbox = bytearray()
        self.outbox: memoryview | None = None
        self.waiting = False  # its request is complete, its answer not made yet


def _response(status: bytes, body: bytes, *, head_only: bool = False) -> bytes:
    head = (
        b"HTTP/1.0 " + status + b"\r\nContent-Type: " + _CONTENT_TYPE
        + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
    )  # fmt: skip
    return head if head_only else head + body


class MetricsHTTPServer:
    """Serves ``render()`` over HTTP on ``listener`` (already bound and listening)."""

    def __init__(
        self,
        listener: socket.socket,
        render: Callable[[], bytes],
        *,
        max_connections: int = MAX_CONNECTIONS,
        deadline: float = DEADLINE,
        min_interval: float = 1.0 / MAX_ANSWERS,
    ) -> None:
        self.listener = listener
        self.server_address = listener.getsockname()
        self.max_connections = max_connections
        self.deadline = deadline
        self.min_interval = min_interval
        self._queue: collections.deque[_Conn] = collections.deque()  # requests to answer
        self._next_answer = 0.0
        self._render = render
        self._conns: collections.OrderedDict[int, _Conn] = collections.OrderedDict()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = threading.Event()
        self._listening = False
        self._resume_at = 0.0
        self.evicted = 0  # connections closed to make room (for tests and curiosity)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._listen(True)
        self._thread = threading.Thread(target=self._run, name="pycni-metrics", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(10)
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._sel.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # ---- the loop (metrics thread only) ------------------------------------------------

    def _listen(self, on: bool) -> None:
        if on and not self._listening:
            self._sel.register(self.listener, selectors.EVENT_READ, self.listener)
        elif not on and self._listening:
            self._sel.unregister(self.listener)
        self._listening = on

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            waits = [c.deadline - now for c in self._conns.values()]
            if not self._listening:
                waits.append(self._resume_at - now)
            if self._queue:
                waits.append(self._next_answer - now)
            timeout = max(0.0, min(waits)) if waits else None
            for key, mask in self._sel.select(timeout):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                elif key.data is self.listener:
                    self._accept()
                else:
                    self._serve(key.data, mask)
            self._answer_due()
            now = time.monotonic()
            for conn in [c for c in self._conns.values() if c.deadline <= now]:
                self._drop(conn)
            if not self._listening and now >= self._resume_at:
                self._listen(True)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                self._listen(False)  # out of fds (or worse): try again in a moment
                self._resume_at = time.monotonic() + ACCEPT_PAUSE
                return
            while len(self._conns) >= self.max_connections:
                self._drop(self._victim())
                self.evicted += 1
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + self.deadline)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _victim(self) -> _Conn:
        """The oldest connection that has not sent a byte (else the oldest): a scraper that
        sent its request is answered even while others open idle connections."""
        for conn in self._conns.values():
            if not conn.inbox:
                return conn
        return next(iter(self._conns.values()))

    def _serve(self, conn: _Conn, mask: int) -> None:
        try:
            if conn.outbox is None and mask & selectors.EVENT_READ:
                data = conn.sock.recv(4096)
                if not data:
                    self._drop(conn)
                    return
                conn.inbox += data
                if not _complete(conn.inbox):
                    return
                conn.waiting = True  # answered in turn (_answer_due); nothing more is read
                self._sel.unregister(conn.sock)
                self._queue.append(conn)
                return
            if conn.outbox is not None:
                self._send(conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)

    def _send(self, conn: _Conn) -> None:
        assert conn.outbox is not None
        while conn.outbox:
            sent = conn.sock.send(conn.outbox, socket.MSG_NOSIGNAL)
            conn.outbox = conn.outbox[sent:]
        self._drop(conn)

    def _answer_due(self) -> None:
        """Answer the oldest waiting request once its turn came (one per min_interval)."""
        while self._queue:
            now = time.monotonic()
            if now < self._next_answer:
                return
            conn = self._queue.popleft()
            if conn.sock.fileno() < 0:
                continue  # dropped meanwhile (deadline, eviction)
            self._next_answer = now + self.min_interval
            answer = self._answer(conn.inbox)
            assert answer is not None
            conn.waiting = False
            conn.outbox = memoryview(answer)
            try:
                self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
                self._send(conn)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(conn)

    def _answer(self, inbox: bytearray) -> bytes | None:
        """The bytes to send once the request head is complete; None while it is not."""
        end = inbox.find(b"\r\n\r\n")
        if end < 0:
            if len(inbox) > MAX_REQUEST:
                return _response(b"431 Request Header Fields Too Large", b"request too large\n")
            return None
        method = bytes(inbox[: inbox.find(b" ")]) if b" " in inbox[:end] else b""
        if method not in (b"GET", b"HEAD"):
            return _response(b"405 Method Not Allowed", b"only GET and HEAD\n")
        try:
            body = self._render()
        except Exception as exc:  # a collector failing must not take the thread down
            return _response(b"500 Internal Server Error", f"{exc}\n".encode())
        return _response(b"200 OK", body, head_only=method == b"HEAD")

    def _drop(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self._conns.pop(fd, None)
            if not conn.waiting:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(conn.sock)
        conn.sock.close()


def _complete(inbox: bytearray) -> bool:
    """The request head arrived (or is already too large to be one)."""
    return b"\r\n\r\n" in inbox or len(inbox) > MAX_REQUEST
