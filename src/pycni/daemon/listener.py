"""The daemon's listening socket: the one systemd passed, or a root-only one it creates (and
removes when it stops, unless another daemon's socket has replaced it).

The socket is created under a directory that is root-owned and not writable by group or
others; it gets its mode from the umask at bind time (no chmod of a path that could have been
swapped), and the directory is checked and bound through an fd, so no symlink is ever followed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

from pycni.daemon.acceptor import Acceptor

LISTEN_FDS_START = 3


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


class Listener:
    def __init__(self, path: str) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.from_systemd = False
        self._ino: tuple[int, int] | None = None

    def bind(self) -> None:
        """Take the socket from systemd if it passed one, else create the root-only socket."""
        sock = socket_from_systemd()
        if sock is not None:
            self.from_systemd = True
            name = sock.getsockname()
            self.path = name if isinstance(name, str) and name else self.path
        else:
            sock = bind_listener(self.path)
            st = os.stat(self.path)
            self._ino = (st.st_dev, st.st_ino)
        self.sock = sock

    def unlink(self) -> None:
        """Remove our socket file: new callers no longer find this daemon."""
        if self.from_systemd or self._ino is None:
            return  # systemd owns the socket file
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ino:
                os.unlink(self.path)
        self._ino = None

    def close(self, acceptor: Acceptor | None) -> None:
        """Stop listening (through the acceptor that serves the socket, if any)."""
        if self.sock is None:
            return
        if acceptor is not None:
            acceptor.close()
        else:
            self.sock.close()
        self.sock = None
        self.unlink()
