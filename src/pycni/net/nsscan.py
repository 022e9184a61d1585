"""Every network namespace alive on this machine, found every way one can be held open.

GC frees an address only when no live namespace holds it, so it needs all live namespaces,
not just those under /run/netns: a runtime may hold its pod's namespace anywhere, and a
namespace whose path was removed (`ip netns del` with a process inside) is still alive.
A network namespace stays alive while

- a thread is in it (``/proc/PID/task/TID/ns/net``: the daemon works inside a pod's
  namespace on one thread only),
- a file is bind-mounted on it (``ip netns``, runtimes' netns dirs), in any mount namespace
  (``/proc/PID/mountinfo`` and ``/proc/PID/task/TID/mountinfo`` for a thread that unshared
  its own, read once per mount namespace),
- a process holds an fd to it (``/proc/PID/fd/*``): told by what the fd *is* (an nsfs inode
  whose ``NS_GET_NSTYPE`` is ``CLONE_NEWNET``), never by its link text, which is the path it
  was opened by (``/run/netns/x``, or ``/`` once that was unmounted),
- or something the kernel does not name pins it (a socket created in it): such a namespace
  is unreachable, no process or runtime can use it any more, and it counts as gone.

The scan only reads /proc.  It is *complete* only when it can see the whole node: this
process is in the initial PID namespace with that namespace's /proc, in the initial user
namespace, and in the mount namespace of init and the kernel threads (see
:func:`view_problems`); no mount namespace is held open without a process in it (its mounts
could not be read); and no process could be examined for a reason other than having exited.
Callers free nothing when it is not complete.  A process whose namespace files even root
may not read (a hardened supervisor) is *opaque*: its own namespace's addresses are still
read through /proc/PID/net and count as live, but its namespace cannot be identified, so no
veth is proven orphaned while such a process exists.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import struct
from collections.abc import Sequence

from pycni.net.ns import CLONE_NEWNET, PROC_SUPER_MAGIC, fs_type
from pycni.record import field, record
from pycni.spec.errors import CNIError

__all__ = [
    "Key",
    "LiveAddresses",
    "LiveNamespace",
    "NamespaceScan",
    "linked_addresses",
    "live_addresses",
    "namespace_key",
    "nsfs_device",
    "nsfs_mount_points",
    "proc_net_addresses",
    "scan",
    "view_problems",
]

CLONE_NEWNS = 0x00020000
NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), Linux 4.11
# Inode numbers the kernel gives its initial namespaces (include/linux/proc_ns.h).
PROC_USER_INIT_INO = 0xEFFFFFFD
PROC_PID_INIT_INO = 0xEFFFFFFC
_NSFS_PREFIX = "net:["
_MNT_PREFIX = "mnt:["
_GONE = (FileNotFoundError, ProcessLookupError, NotADirectoryError)

Key = tuple[int, int]  # (st_dev, st_ino) of an nsfs inode


@record(frozen=True)
class LiveNamespace:
    """One live namespace: its identity, a path that opens it, and how it was found."""

    key: Key
    path: str
    label: str


@record
class NamespaceScan:
    namespaces: list[LiveNamespace] = field(default_factory=list)
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    opaque: dict[str, list[str]] = field(default_factory=dict)  # label -> its addresses

    def keys(self) -> set[Key]:
        return {ns.key for ns in self.namespaces}


def nsfs_device() -> int | None:
    """The device number of nsfs, which every namespace file has; None without /proc."""
    try:
        return os.stat("/proc/self/ns/net").st_dev
    except OSError:
        return None


def namespace_key(path: str) -> Key | None:
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


def ns_type(path: str) -> int:
    """The CLONE_NEW* type of the namespace file ``path`` (NS_GET_NSTYPE on an fd of it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return int(fcntl.ioctl(fd, NS_GET_NSTYPE))
    finally:
        os.close(fd)


# --- can this process see the whole node? ------------------------------------------------


def _key(path: str) -> Key:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def _is_kthreadd(pid: str) -> bool:
    """``pid`` is the kernel's thread creator: comm kthreadd, no parent."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read(4096)
    except OSError:
        return False
    comm = text[text.find("(") + 1 : text.rfind(")")]
    rest = text[text.rfind(")") + 1 :].split()
    return comm == "kthreadd" and len(rest) > 1 and rest[1] == "0"


def view_problems() -> list[str]:
    """Why a scan from this process cannot see every namespace of the node; [] when it can.

    - PID namespace: only the initial one's /proc lists every process.  Its inode number is
      fixed by the kernel (0xEFFFFFFC), and ``/proc/self`` must name this process (a /proc
      mounted for another PID namespace does not).  (NS_GET_PARENT cannot tell: it fails
      with EPERM inside a child namespace as well as in the initial one.)
    - user namespace: root of a child user namespace may not look into the node's.
    - mount namespace: the cache and /run/netns name paths in the node's mount namespace,
      the one init (pid 1) and the kernel threads (kthreadd, pid 2) are in; each of the two
      whose namespace can be read must be ours (at least one must be readable).
    """
    problems: list[str] = []
    try:
        if fs_type("/proc") != PROC_SUPER_MAGIC:
            return ["/proc is not a proc filesystem"]
    except CNIError as exc:
        return [f"/proc is not usable: {exc.msg}"]
    try:
        pid_ino = os.stat("/proc/self/ns/pid").st_ino
        user_ino = os.stat("/proc/self/ns/user").st_ino
        proc_self = os.readlink("/proc/self")
        own_mnt = _key("/proc/self/ns/mnt")
    except OSError as exc:
        return [f"cannot tell which namespaces this process is in: {exc}"]
    if pid_ino != PROC_PID_INIT_INO:
        problems.append(
            f"pycni runs in a PID namespace of its own (pid:[{pid_ino}]): /proc shows only "
            "part of the node's processes"
        )
    elif proc_self != str(os.getpid()):
        problems.append("/proc is mounted for another PID namespace than pycni's")
    if user_ino != PROC_USER_INIT_INO:
        problems.append(
            f"pycni runs in a user namespace of its own (user:[{user_ino}]): it may not "
            "look into the node's namespaces"
        )
    if problems:
        return problems
    references: list[tuple[str, Key]] = []
    for pid, who in (("1", "init (pid 1)"), ("2", "kthreadd (pid 2)")):
        if pid == "2" and not _is_kthreadd(pid):
            continue
        try:
            references.append((who, _key(f"/proc/{pid}/ns/mnt")))
        except PermissionError:
            continue  # a hardened init: the other reference decides
        except OSError as exc:
            problems.append(f"cannot read the mount namespace of {who}: {exc}")
    if not references and not problems:
        problems.append("cannot read the mount namespace of init (pid 1) or of kthreadd (pid 2)")
    for who, ref in references:
        if ref != own_mnt:
            problems.append(
                f"pycni runs in a mount namespace of its own (mnt:[{own_mnt[1]}], {who} is "
                f"in mnt:[{ref[1]}]): /run/netns and the paths in the result cache may not "
                "be the node's"
            )
            break
    return problems


# --- reading /proc ---------------------------------------------------------------------


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


def nsfs_mount_points(mountinfo: str, prefix: str = _NSFS_PREFIX) -> list[str]:
    """Mount points of namespace files (network ones by default) in a mountinfo text."""
    points = []
    for line in mountinfo.splitlines():
        fields, sep, rest = line.partition(" - ")
        parts, fstype = fields.split(), rest.split()[:1]
        if not sep or len(parts) < 5 or fstype != ["nsfs"]:
            continue
        if parts[3].startswith(prefix):
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
        self._seen: set[Key] = set()
        self._other_types: set[Key] = set()  # nsfs inodes of other namespace types
        self._nsfs = nsfs_device()
        self._own_mnt = _own_mount_namespace()
        self._mount_namespaces: set[Key] = set()  # those whose mountinfo was read
        self._held_mount_namespaces: dict[Key, str] = {}  # bind-mounted or open: key -> where

    def add(self, path: str, label: str) -> None:
        try:
            st = os.stat(path)
        except _GONE:
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
        for fd in self._listdir(f"{base}/fd"):
            self._fd(f"{base}/fd/{fd}", f"pid {pid} fd {fd}")
        self._mounts(base)
        for tid in self._listdir(f"{base}/task"):
            if tid != pid:  # a thread may be in a network or mount namespace of its own
                self.add(f"{base}/task/{tid}/ns/net", f"pid {pid} thread {tid}")
                self._mounts(f"{base}/task/{tid}")

    def _fd(self, path: str, label: str) -> None:
        """An open fd: a network namespace if it is an nsfs inode of type CLONE_NEWNET."""
        try:
            st = os.stat(path)  # follows the fd to what it is, whatever its link text says
        except _GONE:
            return
        except OSError as exc:
            self.fail(f"cannot stat {path}: {exc}")
            return
        key = (st.st_dev, st.st_ino)
        if st.st_dev != self._nsfs or key in self._seen or key in self._other_types:
            return
        try:
            kind = ns_type(path)
        except _GONE:
            return
        except OSError as exc:
            self.fail(f"cannot tell the namespace type of {path}: {exc}")
            return
        if kind == CLONE_NEWNET:
            self._seen.add(key)
            self.scan.namespaces.append(LiveNamespace(key, path, label))
            return
        self._other_types.add(key)
        if kind == CLONE_NEWNS:
            self._held_mount_namespaces.setdefault(key, label)

    def _opaque(self, pid: str) -> None:
        try:
            addresses = proc_net_addresses(f"/proc/{pid}/net")
        except _GONE:
            return
        except OSError as exc:
            self.fail(f"cannot read the addresses of pid {pid}: {exc}")
            return
        self.scan.opaque[f"pid {pid}"] = addresses
        self.scan.problems.append(  # a note, not incompleteness: see the module text
            f"pid {pid} is opaque (even root may not read its namespace files or fds): its "
            f"network namespace's addresses are read through /proc/{pid}/net, but a namespace "
            "only it holds by an fd, and that no link of this one leads to, is not seen; no "
            "veth is freed while it runs"
        )

    def _mounts(self, base: str) -> None:
        """The namespace files mounted in the mount namespace of ``base`` (/proc/PID or
        /proc/PID/task/TID), read once per mount namespace."""
        try:
            mnt = _key(f"{base}/ns/mnt")
        except _GONE:
            return
        except OSError as exc:
            self.fail(f"cannot stat {base}/ns/mnt: {exc}")
            return
        if mnt in self._mount_namespaces:
            return
        try:
            with open(f"{base}/mountinfo", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except _GONE:
            return
        except OSError as exc:
            self.fail(f"cannot read {base}/mountinfo: {exc}")
            return
        self._mount_namespaces.add(mnt)
        own = mnt == self._own_mnt
        for point in nsfs_mount_points(text):
            self.add(point if own else f"{base}/root{point}", point)
        for point in nsfs_mount_points(text, _MNT_PREFIX):
            path = point if own else f"{base}/root{point}"
            try:
                self._held_mount_namespaces.setdefault(_key(path), path)
            except OSError:
                continue  # unmounted meanwhile, or in a namespace we cannot enter

    def check_held_mount_namespaces(self) -> None:
        """A mount namespace held open with no process in it hides the mounts made in it."""
        for key, where in sorted(self._held_mount_namespaces.items()):
            if key not in self._mount_namespaces:
                self.fail(
                    f"mount namespace mnt:[{key[1]}] is held open ({where}) with no process "
                    "in it: the namespaces mounted in it cannot be seen"
                )

    def _listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except _GONE:
            return []
        except OSError as exc:
            self.fail(f"cannot list {path}: {exc}")
            return []


def _own_mount_namespace() -> Key | None:
    try:
        return _key("/proc/self/ns/mnt")
    except OSError:
        return None


@record
class LiveAddresses:
    """Every address configured in a live network namespace (this one included)."""

    addresses: set[str] = field(default_factory=set)
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    namespaces: int = 0


def _addresses_in(fd: int) -> set[str]:
    from pycni.net.netlink.client import rtnl
    from pycni.net.ns import entered_fd

    with entered_fd(fd), rtnl() as kernel:
        return {str(found.interface.ip) for found in kernel.addresses()}


RTM_NEWNSID, RTM_GETNSID = 88, 90
NETNSA_NSID = 1
IFA_TARGET_NETNSID = 10  # Linux 4.20: dump another namespace's addresses by its nsid
_RTGENMSG = struct.Struct("=Bxxx")
_S32 = struct.Struct("=i")


def linked_addresses() -> dict[int, set[str]]:
    """nsid -> addresses, for every namespace this one knows by an nsid, read without
    entering it (RTM_GETADDR with IFA_TARGET_NETNSID).

    Every namespace a link of ours leads to (a pod's veth, a moved macvlan) has an nsid here,
    whoever holds it: this covers what the /proc scan cannot see (an fd held by a process
    whose fds even root may not read).  {} on kernels that cannot do this (before 4.20).
    """
    from pycni.net.netlink.kernel import NetlinkError
    from pycni.net.netlink.rtnl import codec
    from pycni.net.netlink.rtnl.wire import NLM_F_DUMP, Socket, attr, parse_attrs

    out: dict[int, set[str]] = {}
    sock = Socket()
    try:
        try:
            replies = sock.request(RTM_GETNSID, NLM_F_DUMP, _RTGENMSG.pack(0))
        except NetlinkError:
            return {}
        nsids = []
        for kind, payload in replies:
            raw = parse_attrs(payload, _RTGENMSG.size, len(payload))
            if kind == RTM_NEWNSID and len(raw.get(NETNSA_NSID, b"")) >= 4:
                nsids.append(_S32.unpack_from(raw[NETNSA_NSID])[0])
        for nsid in sorted(n for n in nsids if n >= 0):
            body = codec.IFADDRMSG.pack(0, 0, 0, 0, 0) + attr(IFA_TARGET_NETNSID, _S32.pack(nsid))
            try:
                dumped = sock.request(codec.RTM_GETADDR, NLM_F_DUMP, body)
            except NetlinkError:
                continue  # gone meanwhile, or a kernel without target nsids
            found = out.setdefault(nsid, set())
            for kind, payload in dumped:
                address = codec.decode_address(payload) if kind == codec.RTM_NEWADDR else None
                if address is not None:
                    found.add(str(address.interface.ip))
    finally:
        sock.close()
    return out


def live_addresses() -> LiveAddresses:
    """The addresses of every namespace :func:`scan` finds, read by netlink inside each.

    Not ``complete`` when the scan is not, or a namespace that still exists could not be
    read: then any address may be in use, and nothing may be freed on this evidence.
    """
    from pycni.net.netlink.client import rtnl

    found = scan()
    nsfs = nsfs_device()
    out = LiveAddresses(complete=found.complete, problems=list(found.problems))
    if not out.complete:
        return out  # nothing may be freed on it: do not look into a thousand namespaces
    with rtnl() as kernel:
        out.addresses = {str(a.interface.ip) for a in kernel.addresses()}
    for ns in found.namespaces:
        try:
            fd = os.open(ns.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except _GONE:
            continue
        except OSError as exc:
            out.complete = False
            out.problems.append(f"cannot open namespace {ns.path}: {exc}")
            continue
        try:
            if os.fstat(fd).st_dev != nsfs:
                continue  # no longer a namespace file: it went away
            out.addresses |= _addresses_in(fd)
            out.namespaces += 1
        except OSError as exc:
            out.complete = False
            out.problems.append(f"cannot read the addresses in namespace {ns.path}: {exc}")
        finally:
            os.close(fd)
    for addresses in found.opaque.values():
        out.addresses.update(addresses)
    for linked in linked_addresses().values():
        out.addresses.update(linked)
    return out


def scan(named: Sequence[tuple[str, str]] = ()) -> NamespaceScan:
    """Every live namespace: ``named`` (label, path) first, so they keep their names.

    Not ``complete`` (with the reasons in ``problems``) when this process cannot see the
    whole node (:func:`view_problems`) or some process could not be examined.
    """
    scanner = _Scanner()
    if scanner._nsfs is None:
        scanner.fail("/proc is not available")
        return scanner.scan
    for problem in view_problems():
        scanner.fail(problem)
    for label, path in named:
        scanner.add(path, label)
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError as exc:
        scanner.fail(f"cannot list /proc: {exc}")
        return scanner.scan
    for pid in sorted(pids, key=int):
        scanner.process(pid)
    scanner.check_held_mount_namespaces()
    return scanner.scan
