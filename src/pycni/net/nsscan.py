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

The scan reads /proc, and enters (with a helper process that does nothing else) each mount
namespace held open with no process in it, so the namespaces mounted there are seen too.  It
sees the node pycni's process is on: the processes of its PID namespace (on a node whose
runtime runs in a container, the container is the node) and the mounts of every mount
namespace they are in, whichever mount namespace pycni itself is in (``ip netns exec`` gives
it one of its own).  Such a partial view is a note (:func:`view_notes`), not a blind spot.
The scan is *complete* unless this process cannot look at all (:func:`view_problems`: /proc
is not its PID namespace's, or it runs in a user namespace of its own) or some process or
namespace could not be examined for a reason other than having gone.  GC's verb decides on
the runtime's list, the scan only keeping more; ``pycni cleanup`` frees nothing when the
scan is not complete.  A process whose namespace files even root may not read (a hardened
supervisor) is *opaque*: its own namespace's addresses are still read through /proc/PID/net
and count as live, but its namespace cannot be identified, so no veth is proven orphaned
while such a process exists.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import select
import struct
import subprocess
import sys
import weakref
from collections.abc import Sequence

from pycni.net.netlink.client import rtnl
from pycni.net.netlink.kernel import NetlinkError
from pycni.net.netlink.rtnl import codec
from pycni.net.netlink.rtnl.wire import NLM_F_DUMP, Socket, attr, parse_attrs
from pycni.net.ns import CLONE_NEWNET, PROC_SUPER_MAGIC, entered_fd, fs_type
from pycni.record import field, record
from pycni.spec.errors import CNIError

CLONE_NEWNS = 0x00020000
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1), Linux 4.9
NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), Linux 4.11
HELPER_TIMEOUT = 10.0  # seconds a helper may take to enter a held mount namespace
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
    # how the view is partial (view_notes): a process outside this PID namespace may hold a
    # namespace unseen, so no veth is proven orphaned on it
    partial: list[str] = field(default_factory=list)
    # helpers sitting in held mount namespaces: the paths of what is mounted there are
    # /proc/HELPER/root/..., valid until close()
    helpers: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def keys(self) -> set[Key]:
        return {ns.key for ns in self.namespaces}

    def close(self) -> None:
        """Stop the helpers (the paths into held mount namespaces stop working)."""
        _stop_helpers(self.helpers)


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


def open_namespace(path: str) -> int | None:
    """An O_RDONLY fd of the namespace file ``path``; None when ``path`` is no namespace file
    (it went away, or something else is there now).

    Paths come from other mount namespaces too (``/proc/PID/root/...``), whose owner may swap
    a component between our checks: the path is opened O_PATH (which opens nothing: no FIFO
    or device is touched), checked to be on nsfs, and only that inode is then opened for
    real, through ``/proc/self/fd``.  Raises OSError when it cannot be opened.
    """
    probe = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if os.fstat(probe).st_dev != nsfs_device():
            return None
        return os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(probe)


# --- can this process see the whole node? ------------------------------------------------


def _key(path: str) -> Key:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def view_problems() -> list[str]:
    """Why a scan from this process cannot look at the node at all; [] when it can.

    - /proc must be a proc filesystem mounted for this process's PID namespace
      (``/proc/self`` names this process): another PID namespace's /proc names other
      processes than the ones it can see.
    - user namespace: root of a child user namespace may not look into the node's.
    """
    try:
        if fs_type("/proc") != PROC_SUPER_MAGIC:
            return ["/proc is not a proc filesystem"]
    except CNIError as exc:
        return [f"/proc is not usable: {exc.msg}"]
    try:
        user_ino = os.stat("/proc/self/ns/user").st_ino
        proc_self = os.readlink("/proc/self")
    except OSError as exc:
        return [f"cannot tell which namespaces this process is in: {exc}"]
    problems: list[str] = []
    if proc_self != str(os.getpid()):
        problems.append("/proc is mounted for another PID namespace than pycni's")
    if user_ino != PROC_USER_INIT_INO:
        problems.append(
            f"pycni runs in a user namespace of its own (user:[{user_ino}]): it may not "
            "look into the node's namespaces"
        )
    return problems


def opaque_note(opaque: dict[str, list[str]]) -> str | None:
    """One plain line for the processes even root may not look into (e.g. this VM's init),
    saying what it means to the user: nothing to do, and GC stays careful around them."""
    if not opaque:
        return None
    labels = sorted(opaque, key=lambda label: int(label.split()[-1]) if label[-1:].isdigit() else 0)
    who = ", ".join(labels)
    one = len(labels) == 1
    return (
        f"{who} {'hides its' if one else 'hide their'} namespaces even from root (as this "
        f"machine's init does); pycni still reads {'its' if one else 'their'} addresses, so GC "
        f"frees none of them and no veth while {'it runs' if one else 'they run'}: nothing to do"
    )


def view_notes() -> list[str]:
    """How this process's view of the machine is partial, though the scan sees the node.

    - PID namespace (its inode number is fixed by the kernel for the initial one): /proc
      lists only the processes of pycni's own, which is the node when the runtime runs in a
      container (kind, k3d, a privileged podman node).  A namespace held only by a process
      outside it is not seen, unless a link of this namespace leads to it.
    - mount namespace: one of pycni's own (``ip netns exec``, a runtime in a container): the
      mounts of every process's mount namespace are read, init's included, and cached paths
      are looked up in init's too (:func:`node_path_key`).
    """
    notes: list[str] = []
    try:
        pid_ino = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return notes
    if pid_ino != PROC_PID_INIT_INO:
        notes.append(
            f"pycni runs in a PID namespace of its own (pid:[{pid_ino}]): the scan sees its "
            "processes (the node, when the runtime runs in a container) and the namespaces "
            "linked to this one"
        )
    init_mnt = _init_mount_namespace()
    own_mnt = _own_mount_namespace()
    if init_mnt is not None and own_mnt is not None and init_mnt != own_mnt:
        notes.append(
            f"pycni runs in a mount namespace of its own (mnt:[{own_mnt[1]}], init is in "
            f"mnt:[{init_mnt[1]}]): the mounts of every mount namespace are read, and "
            "cached paths are looked up in init's too"
        )
    return notes


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


def _node_process() -> tuple[str, Key] | None:
    """A process in the node's mount namespace and that namespace: init (pid 1) of this PID
    namespace, else (a hardened init) kthreadd (pid 2); None when neither can be read."""
    for pid in ("1", "2"):
        if pid == "2" and not _is_kthreadd(pid):
            continue
        try:
            return pid, _key(f"/proc/{pid}/ns/mnt")
        except OSError:
            continue
    return None


def _init_mount_namespace() -> Key | None:
    found = _node_process()
    return found[1] if found else None


def node_path_key(path: str) -> Key | None:
    """:func:`namespace_key` of ``path`` as the node sees it: in this mount namespace, else
    (pycni being in one of its own) in init's, through ``/proc/1/root`` (or kthreadd's)."""
    found = namespace_key(path)
    if found is not None or not os.path.isabs(path):
        return found
    node = _node_process()
    if node is None or node[1] == _own_mount_namespace():
        return None
    return namespace_key(f"/proc/{node[0]}/root{path}")


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
        self._held_mount_namespaces: dict[Key, str] = {}  # bind-mounted or open: key -> path
        self._entered: set[Key] = set()  # held mount namespaces a helper was sent into

    def add(self, path: str, label: str, unprivileged: bool = False) -> None:
        """``unprivileged``: ``path`` is in a mount namespace of a user namespace other than
        the initial one, whose owner (anyone) chose it: not reaching it (a mount point path
        too long to resolve, say) is a note, not a blind spot.  No runtime's live pod is held
        only there: runtimes run as root in the initial user namespace, and what they hold
        the scan sees."""
        try:
            st = os.stat(path)
        except _GONE:
            return  # gone meanwhile: it holds nothing
        except OSError as exc:
            if unprivileged:
                self.scan.problems.append(f"skipped {path[:200]} (an unprivileged mount): {exc}")
            else:
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
            self._held_mount_namespaces.setdefault(key, path)

    def _opaque(self, pid: str) -> None:
        try:
            addresses = proc_net_addresses(f"/proc/{pid}/net")
        except _GONE:
            return
        except OSError as exc:
            self.fail(f"cannot read the addresses of pid {pid}: {exc}")
            return
        # not incompleteness, and nothing a user can act on: see the module text and
        # opaque_note (what inspect tells them, once)
        self.scan.opaque[f"pid {pid}"] = addresses

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
        unprivileged = _owned_by_child_user_namespace(f"{base}/ns/mnt")
        for point in nsfs_mount_points(text):
            self.add(point if own else f"{base}/root{point}", point, unprivileged)
        for point in nsfs_mount_points(text, _MNT_PREFIX):
            path = point if own else f"{base}/root{point}"
            try:
                self._held_mount_namespaces.setdefault(_key(path), path)
            except OSError:
                continue  # unmounted meanwhile, or in a namespace we cannot enter

    def enter_held_mount_namespaces(self) -> None:
        """A mount namespace held open with no process in it (by an fd, or bind-mounted):
        a helper enters it, so its mounts are read as any process's (until none is left:
        one may hold another)."""
        while True:
            pending = [
                (key, path)
                for key, path in sorted(self._held_mount_namespaces.items())
                if key not in self._mount_namespaces and key not in self._entered
            ]
            if not pending:
                return
            for key, path in pending:
                self._entered.add(key)
                self._enter(key, path)

    def _enter(self, key: Key, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except _GONE:
            return  # its holder let it go meanwhile
        except OSError as exc:
            self.fail(f"cannot open the held mount namespace mnt:[{key[1]}] ({path}): {exc}")
            return
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != key:
                return  # the fd number or mount point holds something else now
            helper, problem = _start_helper(fd)
        finally:
            os.close(fd)
        if helper is None:
            why = f"cannot enter the held mount namespace mnt:[{key[1]}] ({path}): {problem}"
            if _owned_by_child_user_namespace(path):
                self.scan.problems.append(why + " (an unprivileged one: a note)")
            else:
                self.fail(why)
            return
        self.scan.helpers.append(helper)
        if len(self.scan.helpers) == 1:
            weakref.finalize(self.scan, _stop_helpers, self.scan.helpers)
        base = f"/proc/{helper.pid}"
        try:
            entered = _key(f"{base}/ns/mnt")
        except OSError as exc:
            self.fail(f"cannot see the helper in mnt:[{key[1]}]: {exc}")
            return
        if entered != key:
            self.fail(f"the helper sent into mnt:[{key[1]}] is in mnt:[{entered[1]}]")
            return
        self._mounts(base)

    def _listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except _GONE:
            return []
        except OSError as exc:
            self.fail(f"cannot list {path}: {exc}")
            return []


def _owned_by_child_user_namespace(path: str) -> bool:
    """The namespace file ``path`` belongs to a user namespace other than the initial one
    (NS_GET_USERNS); False when that cannot be told."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        owner = int(fcntl.ioctl(fd, NS_GET_USERNS))
    except OSError:
        return False  # EPERM: owned by an ancestor of ours, i.e. the initial one here
    finally:
        os.close(fd)
    try:
        return os.fstat(owner).st_ino != PROC_USER_INIT_INO
    finally:
        os.close(owner)


def _own_mount_namespace() -> Key | None:
    try:
        return _key("/proc/self/ns/mnt")
    except OSError:
        return None


# Runs in the helper: enters the mount namespace open as fd argv[1], says so, and waits for
# its stdin to close.  After setns it uses builtins only: the namespace's files may be
# anyone's, so nothing may be imported or run from them.
_HELPER = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.setns(int(sys.argv[1]), 0x20000) != 0:\n"
    "    os.write(1, b'setns: ' + os.strerror(ctypes.get_errno()).encode() + b'\\n')\n"
    "    os._exit(1)\n"
    "os.write(1, b'in\\n')\n"
    "os.read(0, 1)\n"
    "os._exit(0)\n"
)


def _start_helper(fd: int) -> tuple[subprocess.Popen[bytes] | None, str]:
    """A helper process inside the mount namespace ``fd``: (it, "") or (None, why not)."""
    try:
        helper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _HELPER, str(fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            close_fds=True,
        )
    except OSError as exc:
        return None, str(exc)
    assert helper.stdout is not None
    ready, _w, _x = select.select([helper.stdout], [], [], HELPER_TIMEOUT)
    answer = os.read(helper.stdout.fileno(), 256).decode(errors="replace").strip() if ready else ""
    if answer == "in":
        return helper, ""
    _stop_helpers([helper])
    return None, answer or f"no answer in {HELPER_TIMEOUT:g} s"


def _stop_helpers(helpers: list[subprocess.Popen[bytes]]) -> None:
    while helpers:
        helper = helpers.pop()
        for stream in (helper.stdin, helper.stdout):
            if stream is not None:
                stream.close()  # its stdin at EOF: it exits
        try:
            helper.wait(timeout=HELPER_TIMEOUT)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


@record
class LiveAddresses:
    """Every address configured in a live network namespace (this one included)."""

    addresses: set[str] = field(default_factory=set)
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    namespaces: int = 0


def _addresses_in(fd: int) -> set[str]:
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
    read: then an address it did not see may be in use.  What it did see is always there
    (GC's verb keeps those whatever the runtime's list says).
    """
    found = scan()
    try:
        return _read_addresses(found)
    finally:
        found.close()


def _read_addresses(found: NamespaceScan) -> LiveAddresses:
    out = LiveAddresses(complete=found.complete, problems=list(found.problems))
    with rtnl() as kernel:
        out.addresses = {str(a.interface.ip) for a in kernel.addresses()}
    for ns in found.namespaces:
        try:
            fd = open_namespace(ns.path)
        except _GONE:
            continue
        except OSError as exc:
            out.complete = False
            out.problems.append(f"cannot open namespace {ns.path}: {exc}")
            continue
        if fd is None:
            continue  # no longer a namespace file: it went away
        try:
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
    notes = view_notes()
    scanner.scan.partial = [note for note in notes if "PID namespace" in note]
    scanner.scan.problems += notes  # a partial view is said, not a blind spot
    for label, path in named:
        scanner.add(path, label)
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError as exc:
        scanner.fail(f"cannot list /proc: {exc}")
        return scanner.scan
    for pid in sorted(pids, key=int):
        scanner.process(pid)
    scanner.enter_held_mount_namespaces()
    return scanner.scan
