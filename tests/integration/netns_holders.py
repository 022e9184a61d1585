"""Who keeps a network namespace alive, seen from outside: a process's threads in it, its fds
of it and the sockets it made in it (a socket holds the namespace it was made in until it is
freed); and the node's nsid for a pod, which the kernel drops only when it destroys the pod's
namespace, so a pod whose nsid went is really gone."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import subprocess
import time

from tests import harness

Key = tuple[int, int]  # (st_dev, st_ino) of a namespace file

SIOCGSKNS = 0x894C  # ioctl: an fd of the network namespace a socket was made in
_PIDFD_GETFD = 438  # syscall number, the same on x86_64 and in the generic table (Linux 5.6)
_libc = ctypes.CDLL(None, use_errno=True)


def namespace_key(path: str) -> Key:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def _copy_fd(pidfd: int, fd: int) -> int | None:
    """A copy of ``fd`` of the process behind ``pidfd``; None when it was closed meanwhile."""
    out = int(_libc.syscall(_PIDFD_GETFD, pidfd, fd, 0))
    if out < 0:
        err = ctypes.get_errno()
        if err == errno.EBADF:
            return None
        raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
    return out


def _socket_namespace(fd: int) -> Key | None:
    try:
        ns = fcntl.ioctl(fd, SIOCGSKNS)
    except OSError:
        return None  # not a socket that has one
    try:
        st = os.fstat(ns)
    finally:
        os.close(ns)
    return (st.st_dev, st.st_ino)


def holders(pid: int, key: Key) -> list[str]:
    """What of process ``pid`` holds the network namespace ``key``: its threads in it, its
    fds that are the namespace file, its sockets made in it. Told by what each fd is, never by
    its link text (a namespace fd reads as the path it was opened by)."""
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if namespace_key(f"/proc/{pid}/task/{tid}/ns/net") == key:
                found.append(f"thread {tid}")
        except FileNotFoundError:
            continue  # the thread ended
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            copy = _copy_fd(pidfd, int(name))
            if copy is None:
                continue
            try:
                try:
                    st = os.fstat(copy)
                except FileNotFoundError:  # e.g. a kept /proc/sys directory of a gone namespace
                    continue
                if (st.st_dev, st.st_ino) == key:
                    found.append(f"fd {name}: the namespace file")
                elif stat.S_ISSOCK(st.st_mode) and _socket_namespace(copy) == key:
                    link = os.readlink(f"/proc/{pid}/fd/{name}")
                    found.append(f"fd {name}: a socket made in it ({link})")
            finally:
                os.close(copy)
    finally:
        os.close(pidfd)
    return found


def nsids(node: harness.Namespace) -> dict[int, str]:
    """nsid -> name (\"\" once its netns file is gone) of the namespaces ``node`` knows."""
    items = node.json("ip", "-j", "netns", "list-id")
    assert isinstance(items, list)
    return {int(item["nsid"]): str(item.get("name", "")) for item in items}


def nsid_of(node: harness.Namespace, pod: harness.Namespace) -> int:
    """The node's nsid for ``pod`` (a link between them gave it one)."""
    found = [nsid for nsid, name in nsids(node).items() if name == pod.name]
    assert found, f"{node.name} has no nsid for {pod.name}"
    return found[0]


def wait_destroyed(node: harness.Namespace, nsid: int, what: str, timeout: float = 30) -> None:
    """Until the kernel destroyed the namespace ``node`` knows as ``nsid`` (it does that
    lazily, on a work queue)."""
    deadline = time.monotonic() + timeout
    while nsid in nsids(node):
        assert time.monotonic() < deadline, f"{what}: its namespace was never destroyed"
        time.sleep(0.05)


# --- what user nobody can hold ----------------------------------------------------------

# Run as nobody: a user, mount and network namespace of its own, with ADDRESS on lo and the
# network namespace bind-mounted in the mount namespace (on a tmpfs it mounts); then only an
# fd (of HOLD: "mnt" or "user") is kept, its last process gone.  Prints "fd mnt-ino net-ino".
_NOBODY_HOLDER = """
import os, subprocess, sys
hold, address = sys.argv[1], sys.argv[2]
script = ("mount -t tmpfs gc /mnt && touch /mnt/n && mount --bind /proc/self/ns/net /mnt/n"
          " && ip link set lo up && ip addr add " + address + "/32 dev lo && echo ready && read x")
child = subprocess.Popen(
    ["unshare", "--user", "--map-root-user", "--mount", "--net", "sh", "-c", script],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
fd = os.open(f"/proc/{child.pid}/ns/{hold}", os.O_RDONLY)
mnt = os.stat(f"/proc/{child.pid}/ns/mnt").st_ino
net = os.stat(f"/proc/{child.pid}/ns/net").st_ino
child.stdin.close()
child.wait()
print(fd, mnt, net, flush=True)
sys.stdin.read()
"""


# Run as nobody inside its own user, mount and network namespaces (ADDRESS on lo): binds its
# network namespace on a mount point whose path is longer than PATH_MAX, and stays.
_NOBODY_DEEP = """
import os, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["ip", "addr", "add", sys.argv[1] + "/32", "dev", "lo"], check=True)
subprocess.run(["mount", "-t", "tmpfs", "gc", "/mnt"], check=True)
os.chdir("/mnt")
for _ in range(45):
    os.mkdir("d" * 100)
    os.chdir("d" * 100)
open("n", "w").close()
subprocess.run(["mount", "--bind", "/proc/self/ns/net", "n"], check=True)
print(0, 0, os.stat("/proc/self/ns/net").st_ino, flush=True)
sys.stdin.read()
"""


class NobodyHolder:
    """A namespace user nobody keeps with no process in it (``kind`` "mnt" or "user"), a
    non-dumpable process of nobody's in a network namespace of its own (``kind`` "opaque"), or
    (``kind`` "deep") that namespace bind-mounted on a path longer than PATH_MAX.
    ``address`` is configured there; ``stop()`` lets it all go."""

    def __init__(self, kind: str, address: str) -> None:
        if kind == "opaque":
            argv = [
                "unshare", "--user", "--map-root-user", "--net", "sh", "-c",
                f"ip link set lo up && ip addr add {address}/32 dev lo && exec python3 -c "
                "\"import ctypes, sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "
                "print('0 0 0', flush=True); sys.stdin.read()\"",
            ]  # fmt: skip
        elif kind == "deep":
            argv = [
                "unshare", "--user", "--map-root-user", "--mount", "--net",
                "/usr/bin/python3", "-c", _NOBODY_DEEP, address,
            ]  # fmt: skip
        else:
            argv = ["/usr/bin/python3", "-c", _NOBODY_HOLDER, kind, address]
        self.proc = subprocess.Popen(
            ["runuser", "-u", "nobody", "--", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert len(line) == 3, f"nobody's {kind} holder did not start"
        self.fd, self.mnt_ino, self.net_ino = (int(x) for x in line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
