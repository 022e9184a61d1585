"""Every network namespace alive on this machine, found every way one can be held open.

GC frees an attachment's state only with evidence that its namespace is gone, so it needs
all live namespaces, not just those under /run/netns: a runtime that keeps no result cache
may hold its pod's namespace anywhere.  A network namespace stays alive while

- a thread is in it (``/proc/PID/task/TID/ns/net``: the daemon works inside a pod's
  namespace on one thread only),
- a file is bind-mounted on it (``ip netns``, runtimes' netns dirs), in any mount namespace
  (``/proc/PID/mountinfo``, one per mount namespace),
- a process holds an fd to it (``/proc/PID/fd/*`` linking to ``net:[inode]``),
- or something the kernel does not name pins it (a socket created in it): such a namespace
  is unreachable, no process or runtime can use it any more, and it counts as gone.

The scan only reads /proc.  It is *complete* unless some process could not be examined for a
reason other than having exited; callers free nothing they could only prove gone with a
complete scan.  A process whose namespace files even root may not read (a hardened
supervisor) is *opaque*: its namespace's addresses are still read through /proc/PID/net and
count as live, but its namespace cannot be identified, so no veth is proven orphaned while
such a process exists.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence

from pycni.record import field, record

_NSFS_PREFIX = "net:["


@record(frozen=True)
class LiveNamespace:
    """One live namespace: its identity, a path that opens it, and how it was found."""

    key: tuple[int, int]  # (st_dev, st_ino) of the nsfs inode
    path: str
    label: str


@record
class NamespaceScan:
    namespaces: list[LiveNamespace] = field(default_factory=list)
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    opaque: dict[str, list[str]] = field(default_factory=dict)  # label -> its addresses

    def keys(self) -> set[tuple[int, int]]:
        return {ns.key for ns in self.namespaces}


def nsfs_device() -> int | None:
    """The device number of nsfs, which every namespace file has; None without /proc."""
    try:
        return os.stat("/proc/self/ns/net").st_dev
    except OSError:
        return None


def namespace_key(path: str) -> tuple[int, int] | None:
    """(device, inode) when ``path`` is a live network namespace file, else None.

    A path that exists but is not on nsfs (an empty mount point left after the namespace was
    unmounted, as some runtimes leave) is not a namespace.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_dev != nsfs_device():
        return None
    return (st.st_dev, st.st_ino)


def _unescape_mount_path(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal ``\\ooo``."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit() and len(text[i + 1 : i + 4]) == 3:
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def nsfs_mount_points(mountinfo: str) -> list[str]:
    """Mount points of network namespace files in one ``/proc/PID/mountinfo`` text."""
    points = []
    for line in mountinfo.splitlines():
        fields, sep, rest = line.partition(" - ")
        parts, fstype = fields.split(), rest.split()[:1]
        if not sep or len(parts) < 5 or fstype != ["nsfs"]:
            continue
        if parts[3].startswith(_NSFS_PREFIX):
            points.append(_unescape_mount_path(parts[4]))
    return points


def proc_net_addresses(net_dir: str) -> list[str]:
    """The local addresses of a process's namespace, from its ``/proc/PID/net`` files."""
    out: list[str] = []
    with open(os.path.join(net_dir, "fib_trie"), encoding="ascii", errors="replace") as f:
        last = ""
        for line in f:
            text = line.strip()
            if text.startswith(("|--", "+--")):
                last = text[3:].strip().split()[0] if text[3:].strip() else ""
            elif text.startswith("/32 host LOCAL") and last:
                out.append(last)
    try:
        with open(os.path.join(net_dir, "if_inet6"), encoding="ascii", errors="replace") as f:
            for line in f:
                hexaddr = line.split()[0] if line.split() else ""
                if len(hexaddr) == 32:
                    groups = [hexaddr[i : i + 4] for i in range(0, 32, 4)]
                    out.append(str(ipaddress.ip_address(":".join(groups))))
    except FileNotFoundError:
        pass  # IPv6 disabled
    return sorted(set(out))


class _Scanner:
    def __init__(self) -> None:
        self.scan = NamespaceScan()
        self._seen: set[tuple[int, int]] = set()
        self._nsfs = nsfs_device()
        self._mount_namespaces: set[int] = set()

    def add(self, path: str, label: str) -> None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            return  # gone meanwhile: it holds nothing
        except OSError as exc:
            self.fail(f"cannot stat {path}: {exc}")
            return
        key = (st.st_dev, st.st_ino)
        if st.st_dev != self._nsfs or key in self._seen:
            return
        self._seen.add(key)
        self.scan.namespaces.append(LiveNamespace(key, path, label))

    def fail(self, problem: str) -> None:
        self.scan.complete = False
        self.scan.problems.append(problem)

    def process(self, pid: str) -> None:
        base = f"/proc/{pid}"
        try:
            os.stat(f"{base}/ns/net")
        except PermissionError:
            self._opaque(pid)
            return
        except OSError:
            return  # exited
        self.add(f"{base}/ns/net", f"pid {pid}")
        for tid in self._listdir(f"{base}/task"):
            if tid != pid:
                self.add(f"{base}/task/{tid}/ns/net", f"pid {pid} thread {tid}")
        for fd in self._listdir(f"{base}/fd"):
            path = f"{base}/fd/{fd}"
            try:
                target = os.readlink(path)
            except (FileNotFoundError, ProcessLookupError):
                continue
            except OSError as exc:
                self.fail(f"cannot read {path}: {exc}")
                continue
            if target.startswith(_NSFS_PREFIX):
                self.add(path, f"pid {pid} fd {fd}")
        self._mounts(pid)

    def _opaque(self, pid: str) -> None:
        try:
            addresses = proc_net_addresses(f"/proc/{pid}/net")
        except (FileNotFoundError, ProcessLookupError):
            return
        except OSError as exc:
            self.fail(f"cannot read the addresses of pid {pid}: {exc}")
            return
        self.scan.opaque[f"pid {pid}"] = addresses

    def _mounts(self, pid: str) -> None:
        try:
            mnt = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        except (FileNotFoundError, ProcessLookupError):
            return
        except OSError as exc:
            self.fail(f"cannot stat /proc/{pid}/ns/mnt: {exc}")
            return
        if mnt in self._mount_namespaces:
            return
        try:
            with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            return
        except OSError as exc:
            self.fail(f"cannot read /proc/{pid}/mountinfo: {exc}")
            return
        self._mount_namespaces.add(mnt)
        own = mnt == _own_mount_namespace()
        for point in nsfs_mount_points(text):
            self.add(point if own else f"/proc/{pid}/root{point}", point)

    def _listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            return []
        except OSError as exc:
            self.fail(f"cannot list {path}: {exc}")
            return []


def _own_mount_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return None


def scan(named: Sequence[tuple[str, str]] = ()) -> NamespaceScan:
    """Every live namespace: ``named`` (label, path) first, so they keep their names."""
    scanner = _Scanner()
    if scanner._nsfs is None:
        scanner.fail("/proc is not available")
        return scanner.scan
    for label, path in named:
        scanner.add(path, label)
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError as exc:
        scanner.fail(f"cannot list /proc: {exc}")
        return scanner.scan
    for pid in sorted(pids, key=int):
        scanner.process(pid)
    return scanner.scan
