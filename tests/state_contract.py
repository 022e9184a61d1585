"""The contract of FakeStateFiles (pycni.state.fake_files): cases run on it and on the disk.

Each case gets a StateFiles and a root directory it owns, does what a plugin does with its
state, and returns plain values: what calls returned, the name of each OSError ("ok" when
none), and the files and directories under the root afterwards (bytes and permission bits).
tests/unit/test_state_contract.py runs every case on pycni.state.disk in a temporary
directory (rootless) and on the fake, and requires the same answers, so neither drifts alone.
What no case can check here, a power cut, the fake models by itself (``crash``) and
tests/integration/test_kill9_campaign.py checks on the real store.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pycni.state.fake_files import FakeStateFiles
from pycni.state.files import StateFiles

Case = Callable[[StateFiles, str], Any]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def outcome(fn: Callable[[], object]) -> object:
    """What the call returned, or the class name of the OSError it raised."""
    try:
        value = fn()
    except OSError as exc:
        return type(exc).__name__
    return "ok" if value is None else value


def tree(files: StateFiles, root: str) -> dict[str, Any]:
    """Every entry under ``root``: files as (bytes, mode), directories as their mode."""
    if isinstance(files, FakeStateFiles):
        out: dict[str, Any] = {
            os.path.relpath(p, root): (b, m) for p, (b, m) in files.tree(root).items()
        }
        for path, mode in files.dirs.items():
            if path.startswith(root + "/"):
                out[os.path.relpath(path, root) + "/"] = mode & 0o777
        return dict(sorted(out.items()))
    out = {}
    for base, dirs, names in os.walk(root):
        for name in dirs:
            path = os.path.join(base, name)
            out[os.path.relpath(path, root) + "/"] = os.stat(path).st_mode & 0o777
        for name in names:
            path = os.path.join(base, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = (fh.read(), os.stat(path).st_mode & 0o777)
    return dict(sorted(out.items()))


@case
def atomic_replace(files: StateFiles, root: str) -> Any:
    path = f"{root}/net/one"
    first = outcome(lambda: files.write_atomic(path, b"a", mode=0o600, dir_mode=0o700))
    again = outcome(lambda: files.write_atomic(path, b"bb", mode=0o644, durable=False))
    nodir = outcome(lambda: files.write_atomic(f"{root}/x/y", b"", make_dirs=False))
    return first, again, nodir, files.read(path), tree(files, root)


@case
def exclusive_create(files: StateFiles, root: str) -> Any:
    path = f"{root}/10.0.0.2"
    made = files.create_exclusive(path, b"cid\r\neth0", mode=0o600)
    taken = files.create_exclusive(path, b"other", mode=0o600)
    files.sync_dir(root)
    missing = outcome(lambda: files.create_exclusive(f"{root}/no/such", b""))
    return made, taken, missing, tree(files, root)


@case
def plain_writes(files: StateFiles, root: str) -> Any:
    path = f"{root}/hosts"
    files.write(path, b"1\n", mode=0o644, append=True)
    files.write(path, b"2\n", append=True)
    appended = files.read(path)
    files.write(path, b"new\n")
    return appended, tree(files, root)


@case
def reads(files: StateFiles, root: str) -> Any:
    files.write(f"{root}/f", b"x" * 70000)
    files.make_dirs(f"{root}/d", mode=0o700)
    return (
        len(files.read(f"{root}/f")),
        outcome(lambda: files.read(f"{root}/missing")),
        outcome(lambda: files.read(f"{root}/f/under")),
        outcome(lambda: files.read(f"{root}/d")),
        outcome(lambda: files.read(f"{root}/f", nofollow=True) and None),
    )


@case
def remove_and_rename(files: StateFiles, root: str) -> Any:
    files.write(f"{root}/a", b"A")
    files.make_dirs(f"{root}/d", mode=0o755)
    files.write(f"{root}/d/in", b"")
    steps = [
        outcome(lambda: files.rename(f"{root}/a", f"{root}/b")),
        outcome(lambda: files.rename(f"{root}/a", f"{root}/c")),
        outcome(lambda: files.remove(f"{root}/b")),
        outcome(lambda: files.remove(f"{root}/b")),
        outcome(lambda: files.remove(f"{root}/d")),
        outcome(lambda: files.remove_dir(f"{root}/d")),
        outcome(lambda: files.remove(f"{root}/d/in")),
        outcome(lambda: files.remove_dir(f"{root}/d")),
        outcome(lambda: files.remove_dir(f"{root}/d")),
    ]
    return steps, tree(files, root)


@case
def listing(files: StateFiles, root: str) -> Any:
    files.make_dirs(f"{root}/net/sub/deeper", mode=0o700)
    for name in ("net/lock", "net/10.0.0.2", "net/sub/10.0.0.3", "net/sub/deeper/x"):
        files.write(f"{root}/{name}", b"")
    return (
        sorted(files.list_dir(f"{root}/net")),
        sorted(os.path.relpath(p, root) for p in files.walk_files(f"{root}/net")),
        files.walk_files(f"{root}/none"),
        outcome(lambda: files.list_dir(f"{root}/none")),
        outcome(lambda: files.list_dir(f"{root}/net/lock")),
        files.is_dir(f"{root}/net"),
        files.is_dir(f"{root}/net/lock"),
        files.is_dir(f"{root}/none"),
    )


@case
def directories(files: StateFiles, root: str) -> Any:
    files.make_dirs(f"{root}/a/b/c", mode=0o700)
    files.make_dirs(f"{root}/a/b/c", mode=0o755)  # there already: unchanged
    files.write(f"{root}/file", b"")
    blocked = outcome(lambda: files.make_dirs(f"{root}/file/sub", mode=0o700))
    return blocked, files.unwritable(f"{root}/a/new/deeper"), tree(files, root)


@case
def unwritable(files: StateFiles, root: str) -> Any:
    files.write(f"{root}/file", b"")
    return files.unwritable(f"{root}/file/net").replace(root, "ROOT")


@case
def locks(files: StateFiles, root: str) -> Any:
    missing = outcome(lambda: files.open_lock(f"{root}/lock", create=False))
    lock = files.open_lock(f"{root}/lock", mode=0o750)
    lock.acquire()
    lock.release()
    lock.acquire()
    current = lock.is_current()
    files.remove(f"{root}/lock")
    gone = lock.is_current()
    lock.release()
    lock.close()
    again = files.open_lock(f"{root}/lock", create=True)
    again.acquire()
    again.close()  # closing drops the flock
    third = files.open_lock(f"{root}/lock", create=False)
    third.acquire()
    third.close()
    return missing, current, gone, tree(files, root)


@case
def trees(files: StateFiles, root: str) -> Any:
    made = files.unsafe_dir(root, ("containers", "cni", "dnsname", "net"), create=True)
    files.make_dirs(f"{root}/containers/cni/dnsname-pycni/net", mode=0o700)
    files.write(f"{root}/containers/cni/dnsname/net/addnhosts", b"10.0.0.2\tweb\n")
    files.write(f"{root}/containers/cni/dnsname-pycni/net/a:eth0", b"web\n")
    tail = ("containers", "cni")
    busy = outcome(lambda: files.remove_empty_dirs(root, tail, ("dnsname-pycni", "net")))
    files.remove_tree(root, (*tail, "dnsname"), "net")
    files.remove_tree(root, (*tail, "dnsname"), "missing")
    refused = outcome(lambda: files.remove_tree(root, (*tail, "dnsname-pycni", "net"), "a:eth0"))
    files.remove(f"{root}/containers/cni/dnsname-pycni/net/a:eth0")
    files.remove_empty_dirs(root, tail, ("dnsname-pycni", "net"))
    files.remove_empty_dirs(root, tail, ("dnsname-pycni", "net"))  # gone: fine
    return made, busy, refused, tree(files, root)
