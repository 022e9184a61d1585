"""Network namespaces: open by path or fd, and run code inside one on the current thread.

setns() changes only the calling thread, so code that enters a namespace must run on a
thread it owns for that time and must get back; a thread that cannot get back is unusable
and we raise instead of continuing in the wrong namespace.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

from pycni.net.errors import NetError
from pycni.spec.errors import INVALID_NETNS, CNIError

CLONE_NEWNET = 0x40000000
NSFS_MAGIC = 0x6E736673
PROC_SUPER_MAGIC = 0x9FA0
THREAD_NETNS = "/proc/thread-self/ns/net"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.setns.restype = ctypes.c_int


class NetNSNotFound(NetError, CNIError):
    """The namespace path does not exist (DEL treats this as already done)."""

    def __init__(self, path: str) -> None:
        super().__init__(INVALID_NETNS, f'failed to Statfs "{path}": no such file or directory')
        self.path = path


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_long * 15)]


_libc.statfs.argtypes = [ctypes.c_char_p, ctypes.POINTER(_StatFs)]


def fs_type(path: str) -> int:
    buf = _StatFs()
    if _libc.statfs(path.encode(), ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        if err == errno.ENOENT:
            raise NetNSNotFound(path)
        raise CNIError(INVALID_NETNS, f'failed to Statfs "{path}": {os.strerror(err)}')
    return int(buf.f_type) & 0xFFFFFFFF


class NetNS:
    """An open network namespace. Close it (or use ``with``) to release the fd."""

    def __init__(self, fd: int, path: str, *, owned: bool = True) -> None:
        self.fd = fd
        self.path = path
        self._owned = owned

    @classmethod
    def open(cls, path: str) -> NetNS:
        """Open ``path`` after checking it is a namespace file (nsfs or procfs), as pkg/ns does."""
        kind = fs_type(path)
        if kind not in (NSFS_MAGIC, PROC_SUPER_MAGIC):
            raise CNIError(INVALID_NETNS, f'unknown FS magic on "{path}": {kind:x}')
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NetNSNotFound(path) from None
        except OSError as exc:
            raise CNIError(INVALID_NETNS, f'failed to open "{path}": {exc.strerror}') from None
        return cls(fd, path)

    @classmethod
    def from_fd(cls, fd: int, path: str = "") -> NetNS:
        """Wrap an fd we were handed (e.g. by the daemon); we do not close it."""
        return cls(fd, path or f"/proc/self/fd/{fd}", owned=False)

    @classmethod
    def current(cls) -> NetNS:
        return cls.open(THREAD_NETNS)

    def close(self) -> None:
        if self._owned and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> NetNS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inode(self) -> tuple[int, int]:
        st = os.fstat(self.fd)
        return (st.st_dev, st.st_ino)

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Run the block with the current thread inside this namespace."""
        with entered_fd(self.fd):
            yield


@contextmanager
def entered_fd(fd: int) -> Iterator[None]:
    """Enter the namespace of ``fd`` on this thread, and get back afterwards."""
    back = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
        try:
            yield
        finally:
            setns(back)
    finally:
        os.close(back)


def same_as_current(path: str) -> bool:
    """True when ``path`` is this thread's own network namespace (skel's error-8 check)."""
    try:
        a = os.stat(path)
        b = os.stat(THREAD_NETNS)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
