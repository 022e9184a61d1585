"""The live-namespace scan GC decides on (pycni.net.nsscan), against the real kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycni.net.nsscan import (
    linked_addresses,
    live_addresses,
    namespace_key,
    open_namespace,
    scan,
    view_notes,
    view_problems,
)
from tests import harness
from tests.integration.netns_holders import NobodyHolder

pytestmark = pytest.mark.kernel

NOBODY_ADDRESS = "10.213.89.9"  # rare: the scan looks into every namespace

FD_HOLDER = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "print(fd, flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def held_by_fd() -> Iterator[tuple[subprocess.Popen[str], int, tuple[int, int]]]:
    """A namespace whose path was removed after a process opened it: only the fd holds it."""
    ns = harness.create_namespace("fdonly")
    key = namespace_key(ns.path)
    assert key is not None
    proc = subprocess.Popen(
        [sys.executable, "-c", FD_HOLDER, ns.path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        fd = int(proc.stdout.readline())
        ns.delete()
        yield proc, fd, key
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        ns.delete()


def test_a_namespace_held_only_by_an_fd_is_found_by_what_the_fd_is(
    held_by_fd: tuple[subprocess.Popen[str], int, tuple[int, int]],
) -> None:
    proc, fd, key = held_by_fd
    link = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
    assert not link.startswith("net:[")  # its link text is a path: no use to tell what it is
    found = scan()
    assert found.complete, found.problems
    (hit,) = [ns for ns in found.namespaces if ns.key == key]
    assert hit.label == f"pid {proc.pid} fd {fd}"


def test_fds_of_other_namespace_types_are_not_network_namespaces() -> None:
    """An fd on a UTS namespace is an nsfs inode too, but no network namespace to look into."""
    holder = subprocess.Popen(
        ["unshare", "--uts", sys.executable, "-c", FD_HOLDER, "/proc/self/ns/uts"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        fd = holder.stdout.readline().strip()
        labels = {ns.label for ns in scan().namespaces}
        assert f"pid {holder.pid} fd {fd}" not in labels
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


# Holds an fd on the mount namespace of a process that then exits: a mount namespace no
# process is in, whose mounts (bind-mounted netns files, say) no /proc/PID/mountinfo shows.
MNT_HOLDER = """
import os, subprocess, sys
child = subprocess.Popen(["unshare", "--mount", "sh", "-c", "echo up; read x"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
child.stdout.readline()
fd = os.open(f"/proc/{child.pid}/ns/mnt", os.O_RDONLY)
child.stdin.close()
child.wait()
print(fd, os.fstat(fd).st_ino, flush=True)
sys.stdin.read()
"""


def _helpers_of_this_process() -> list[int]:
    """This process's children running the scan's helper (``-I -S -c``)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError):
            continue
        if pid.isdigit() and ppid == str(os.getpid()) and b"-S" in argv:
            out.append(int(pid))
    return out


def test_a_mount_namespace_held_with_no_process_in_it_is_entered_and_read() -> None:
    """Root's held mount namespace: a helper enters it; the scan stays complete."""
    holder = subprocess.Popen(
        [sys.executable, "-c", MNT_HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        _fd, ino = holder.stdout.readline().split()
        found = scan()
        try:
            assert found.complete, found.problems
            assert not any(f"mnt:[{ino}]" in p for p in found.problems)
            assert len(found.helpers) == 1 and _helpers_of_this_process()
        finally:
            found.close()
        assert found.helpers == [] and _helpers_of_this_process() == []
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_what_nobody_mounts_in_a_mount_namespace_it_holds_with_no_process_is_seen() -> None:
    """Issue #32 item 3: user nobody's held mount namespace made every GC refuse.  Now its
    mounts are read (a helper enters it): the namespace bind-mounted there is found, its
    address is live, the scan is complete, and no helper outlives the look."""
    holder = NobodyHolder("mnt", NOBODY_ADDRESS)
    try:
        live = live_addresses()
        assert live.complete, live.problems
        assert NOBODY_ADDRESS in live.addresses
        found = scan()
        try:
            assert found.complete, found.problems
            hits = [ns for ns in found.namespaces if ns.key[1] == holder.net_ino]
            assert hits and hits[0].label == "/mnt/n", found.namespaces
        finally:
            found.close()
        assert _helpers_of_this_process() == []
    finally:
        holder.stop()


def test_a_mount_point_nobody_makes_too_long_to_resolve_is_a_note_not_a_blind_spot() -> None:
    """User nobody binds its network namespace on a path longer than PATH_MAX in its own
    mount namespace: stat of /proc/PID/root/... fails (ENAMETOOLONG).  That made the scan
    incomplete (`pycni cleanup` refused); a mount of an unprivileged user's is a note."""
    holder = NobodyHolder("deep", NOBODY_ADDRESS)
    try:
        found = scan()
        found.close()
        assert found.complete, found.problems
        assert any("an unprivileged mount" in p for p in found.problems), found.problems
        live = live_addresses()
        assert live.complete and NOBODY_ADDRESS in live.addresses  # its process is in it
    finally:
        holder.stop()


PROBE = (
    "import json; from pycni.net.nsscan import view_notes, view_problems; "
    "print(json.dumps([view_problems(), view_notes()]))"
)


@pytest.mark.parametrize(
    ("wrapper", "problem", "note"),
    [
        ([], None, None),
        (["unshare", "--mount"], None, "mount namespace of its own"),
        (["ip", "netns", "exec", "{node}"], None, "mount namespace of its own"),
        (["unshare", "--pid", "--fork", "--mount-proc"], None, "PID namespace of its own"),
        (["unshare", "--pid", "--fork"], "another PID namespace", "PID namespace of its own"),
        (["unshare", "--user", "--map-root-user"], "user namespace of its own", None),
    ],
)
def test_view_problems_and_notes_say_what_this_process_can_see(
    wrapper: list[str], problem: str | None, note: str | None, node: harness.Namespace
) -> None:
    """Only /proc of another PID namespace and a user namespace of its own blind the scan;
    a PID or mount namespace of its own (a container node, ``ip netns exec``) is a note."""
    argv = [part.format(node=node.name) for part in wrapper]
    proc = subprocess.run(
        [*argv, sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    problems, notes = json.loads(proc.stdout)
    if problem is None:
        assert problems == [], problems
    else:
        assert any(problem in p for p in problems), problems
    if note is None:
        assert notes == [], notes
    else:
        assert any(note in n for n in notes), notes
    if not wrapper:
        assert view_problems() == [] == view_notes()


def test_a_namespace_linked_to_this_one_is_read_by_its_nsid_without_entering_it(
    node: harness.Namespace,
    held_by_fd: tuple[subprocess.Popen[str], int, tuple[int, int]],
) -> None:
    """A pod's veth gives its namespace an nsid in the node's: its addresses are read from
    there whoever holds it (what covers a holder /proc cannot show)."""
    proc, fd, _key = held_by_fd
    pod = f"/proc/{proc.pid}/fd/{fd}"
    subprocess.run(
        [
            "nsenter",
            f"--net={node.path}",
            "--",
            "ip",
            "link",
            "add",
            "lk0",
            "type",
            "veth",
            "peer",
            "name",
            "lk1",
        ],
        check=True,
    )
    subprocess.run(
        ["nsenter", f"--net={node.path}", "--", "ip", "link", "set", "lk1", "netns", pod],
        check=True,
    )
    subprocess.run(
        ["nsenter", f"--net={pod}", "--", "ip", "addr", "add", "10.213.99.7/24", "dev", "lk1"],
        check=True,
    )
    with node.entered():
        linked = linked_addresses()
    assert [nsid for nsid, found in linked.items() if "10.213.99.7" in found], linked
    with node.entered():
        live = live_addresses()
    assert live.complete and "10.213.99.7" in live.addresses


# A thread that unshares its mount namespace (as Go runtimes do on a locked thread) and
# bind-mounts a network namespace there: no process's own mountinfo shows that mount.
THREAD_MOUNT_HOLDER = """
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 0x1000, 0x4000, 1 << 18
source, directory = sys.argv[1].encode(), sys.argv[2]

def run():
    assert libc.unshare(CLONE_NEWNS) == 0, ctypes.get_errno()
    assert libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
    assert libc.mount(b"tmpfs", directory.encode(), b"tmpfs", 0, None) == 0
    target = os.path.join(directory, "ns")
    open(target, "w").close()
    assert libc.mount(source, target.encode(), None, MS_BIND, None) == 0
    print(threading.get_native_id(), flush=True)
    sys.stdin.read()

threading.Thread(target=run).start()
"""


def test_a_namespace_mounted_in_a_threads_own_mount_namespace_is_found(
    tmp_path: Path,
) -> None:
    ns = harness.create_namespace("thrmnt")
    key = namespace_key(ns.path)
    holder = subprocess.Popen(
        [sys.executable, "-c", THREAD_MOUNT_HOLDER, ns.path, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        tid = holder.stdout.readline().strip()
        assert tid, "the holder thread did not start"
        ns.delete()
        assert namespace_key(ns.path) is None
        found = scan()
        hits = [n for n in found.namespaces if n.key == key]
        assert hits and hits[0].path.startswith(f"/proc/{holder.pid}/task/{tid}/root/"), hits
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        ns.delete()


def test_open_namespace_opens_only_namespace_files(tmp_path: Path) -> None:
    """What a path in someone else's mount namespace leads to is not opened unless it is a
    namespace file: a FIFO (no reader: a plain open would hang) and a device are left alone."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert open_namespace(str(fifo)) is None
    assert open_namespace("/dev/null") is None
    fd = open_namespace("/proc/self/ns/net")
    assert fd is not None
    try:
        assert os.fstat(fd).st_ino == os.stat("/proc/self/ns/net").st_ino
    finally:
        os.close(fd)
