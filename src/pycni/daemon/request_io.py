"""The daemon's socket: a root-only listener, and non-blocking request reads and reply writes.

Everything here runs on the daemon's main thread, driven by its selector: a slow client
costs a registered fd, never a worker. The listener is created under a directory that is
root-owned and not writable by group or others; the socket gets its mode from the umask at
bind time (no chmod of a path that could have been swapped), and the directory is checked
and bound through an fd, so no symlink is ever followed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct

from pycni.daemon import protocol
from pycni.daemon.protocol import Request

LISTEN_FDS_START = 3
_CHUNK = 1 << 20


class SocketSetupError(Exception):
    """The listening socket cannot be created safely (bad directory, another daemon, ...)."""


def _check_directory(fd: int, path: str, *, created: bool) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise SocketSetupError(f"{path} is not a directory")
    if created:
        os.fchmod(fd, 0o700)
        return
    if st.st_uid != 0:
        raise SocketSetupError(f"{path} is owned by uid {st.st_uid}, not root")
    if st.st_mode & 0o022:
        raise SocketSetupError(
            f"{path} is writable by group or others (mode {st.st_mode & 0o7777:04o}); "
            "use a root-only directory such as /run/pycni (0700)"
        )


def open_socket_directory(socket_path: str) -> int:
    """Create (0700) or check the socket's directory; returns an O_PATH-like dir fd."""
    parent = os.path.dirname(os.path.abspath(socket_path))
    created = False
    if not os.path.lexists(parent):
        os.makedirs(os.path.dirname(parent), exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(parent, 0o700)
            created = True
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SocketSetupError(f"cannot open {parent}: {exc.strerror} (a symlink?)") from None
    try:
        _check_directory(fd, parent, created=created)
    except BaseException:
        os.close(fd)
        raise
    return fd


def bind_listener(socket_path: str, backlog: int = 512) -> socket.socket:
    """A non-blocking listening socket at ``socket_path``, mode 0600, in a checked directory."""
    dir_fd = open_socket_directory(socket_path)
    name = os.path.basename(socket_path)
    via_fd = f"/proc/self/fd/{dir_fd}/{name}"  # the very directory we checked
    try:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(name, dir_fd=dir_fd)
            if not stat.S_ISSOCK(st.st_mode):
                raise SocketSetupError(f"{socket_path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(via_fd)
            except OSError:
                os.unlink(name, dir_fd=dir_fd)  # stale: left by a daemon that did not exit
            else:
                raise SocketSetupError(f"another pycni daemon is serving on {socket_path}")
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(via_fd)
        finally:
            os.umask(old_umask)
        listener.listen(backlog)
        listener.setblocking(False)
        return listener
    finally:
        os.close(dir_fd)


def socket_from_systemd() -> socket.socket | None:
    """The listening socket passed by systemd (LISTEN_PID/LISTEN_FDS), checked; else None."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        count = 0
    for var in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(var, None)  # not for our children
    if count < 1:
        return None
    if count > 1:
        raise SocketSetupError(f"systemd passed {count} sockets; pycni.socket must have one")
    sock = socket.socket(fileno=LISTEN_FDS_START)
    os.set_inheritable(LISTEN_FDS_START, False)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise SocketSetupError("the socket passed by systemd is not a unix stream socket")
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        raise SocketSetupError("the socket passed by systemd is not listening")
    path = sock.getsockname()
    if isinstance(path, str) and path:
        dir_fd = open_socket_directory(path)
        try:
            st = os.lstat(os.path.basename(path), dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        if st.st_uid != 0 or st.st_mode & 0o022:  # connect() needs write permission
            raise SocketSetupError(
                f"{path} must be owned by root and writable by root only "
                "(SocketMode=0600 in pycni.socket)"
            )
    sock.setblocking(False)
    return sock


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
