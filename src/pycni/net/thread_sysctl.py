"""sysctls through /proc/sys. Entries under net/ are per network namespace and resolve to the
namespace of the thread that opens them, so a thread inside a namespace can set its values.

Looking up ``net/ipv4`` or ``net/ipv6`` below the one /proc/sys/net of the machine passes one
cached entry per namespace that ever opened it (a global lock taken for each), so on a node with
many pods every such open costs O(pods) (measured: docs/benchmarks.md). Opens under those two
directories therefore go relative to a directory fd of this thread's namespace, kept for the few
namespaces used last (the warm daemon's node). A kept fd cannot reach another namespace: it is
found by the namespace's inode, which no other live namespace has, and once its namespace is
gone the kernel answers ENOENT below it, on which the full path is tried. A kept fd holds the
directory, not its namespace: a pod's namespace whose directories are kept is still destroyed
when its last holder goes (tests/integration/test_sysctl_kept_dirs.py), so GC never sees it live
because of them.
"""

from __future__ import annotations

import _thread  # threading.Lock is _thread.allocate_lock; threading costs an import
import os
from collections import OrderedDict


def path_of(name: str) -> str:
    """``net.ipv4.ip_forward`` or ``net/ipv4/conf/eth0.100/x`` → the file under /proc/sys.

    When a dot appears before the first slash the name is in dotted form: dots become
    slashes and slashes dots (so interface names with dots survive), as pkg/utils/sysctl.
    """
    slash = name.find("/")
    dot = name.find(".")
    if dot != -1 and (slash == -1 or dot < slash):
        name = name.translate(str.maketrans("./", "/."))
    return "/proc/sys/" + name


_PROC_SYS = "/proc/sys/"
_FAMILY_DIRS = ("net/ipv4/", "net/ipv6/")
_KEPT = 8  # directory fds kept: (namespace, family) pairs used last
_kept: OrderedDict[tuple[int, int, str], int] = OrderedDict()
_kept_lock = _thread.allocate_lock()  # held while a kept fd is used, so none is closed under a user


def _after_fork_in_child() -> None:
    """A forked child starts with no kept fds and a free lock (the parent's other threads
    are gone, one of them may have held it)."""
    global _kept_lock
    _kept_lock = _thread.allocate_lock()
    for fd in _kept.values():
        os.close(fd)
    _kept.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _kept_dir(key: tuple[int, int, str], family_dir: str) -> int:
    """The directory fd for ``key`` (opened now if not kept); caller holds _kept_lock."""
    fd = _kept.get(key)
    if fd is not None:
        _kept.move_to_end(key)
        return fd
    fd = os.open(_PROC_SYS + family_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    _kept[key] = fd
    while len(_kept) > _KEPT:
        _, old = _kept.popitem(last=False)
        os.close(old)
    return fd


def _forget(key: tuple[int, int, str]) -> None:
    fd = _kept.pop(key, None)
    if fd is not None:
        os.close(fd)


def open_entry(name: str, flags: int) -> int:
    """An fd of the entry ``name`` (path_of's forms) opened with ``flags``: below net/ipv4 and
    net/ipv6 relative to this namespace's kept directory fd, anything else by its full path."""
    path = path_of(name)
    rel = path[len(_PROC_SYS) :]
    family_dir = rel[: len(_FAMILY_DIRS[0])]
    rest = rel[len(family_dir) :]
    parts = rest.split("/")
    # only plain relative names take the short way: "" (an absolute rest would ignore the
    # directory fd), "." and ".." go by the full path, resolved as they always were
    if family_dir not in _FAMILY_DIRS or any(p in ("", ".", "..") for p in parts):
        return os.open(path, flags | os.O_CLOEXEC)
    ns = os.stat("/proc/thread-self/ns/net")
    key = (ns.st_dev, ns.st_ino, family_dir)
    with _kept_lock:
        try:
            return os.open(rest, flags | os.O_CLOEXEC, dir_fd=_kept_dir(key, family_dir))
        except FileNotFoundError:
            _forget(key)  # its namespace may be gone; the full path decides
    return os.open(path, flags | os.O_CLOEXEC)


def read(name: str) -> str:
    fd = open_entry(name, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    return data[:-1].decode() if data.endswith(b"\n") else data.decode()


def write(name: str, value: str) -> None:
    fd = open_entry(name, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def try_write(name: str, value: str) -> None:
    """Best effort (e.g. an IPv6 knob on a node with IPv6 disabled), as the reference."""
    try:
        write(name, value)
    except OSError:
        return
