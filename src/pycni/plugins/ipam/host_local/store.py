"""The on-disk reservation store, file-compatible with the Go reference.

Layout under ``<dataDir>/<network>/``:

- ``<ip>``: one file per reserved address (IPv6 in compressed form), created with
  O_EXCL and mode 0600, holding ``<containerID>\\r\\n<ifname>`` without a newline,
  fsynced together with the directory before the address is handed out.
  Files written by old reference versions hold only ``<containerID>``.
- ``last_reserved_ip.<setIndex>``: the last address reserved in that range set.
- ``lock``: flock(LOCK_EX) on it serialises every allocator operation; the Go binary
  takes the same lock, so both can work on one directory at the same time.

Every file operation goes through the StateFiles the store is given (``req.host.state()``:
the node's disk, or FakeStateFiles in a rootless test); the in-memory owner index (index.py)
is used only over the disk, which its inotify watches.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from pycni.net import ipmath
from pycni.net.ipmath import IPAddress
from pycni.plugins.ipam.host_local.index import REGISTRY, DirIndex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import FileLock, StateFiles

LAST_IP_PREFIX = "last_reserved_ip."
LOCK_NAME = "lock"
LINE_BREAK = "\r\n"
# Go's strings.TrimSpace removes Unicode white space (not Python's extra \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)


_READ_MAX = 1 << 16  # a reservation holds an ID and an ifname


def go_trim(text: str) -> str:
    return text.strip(_GO_SPACE)


def owner_key(container_id: str, ifname: str) -> str:
    """The content of a reservation file for this attachment."""
    return go_trim(container_id) + LINE_BREAK + ifname


def is_reservation_name(name: str) -> bool:
    """Bookkeeping files (``lock``, ``last_reserved_ip.*``) are never reservations."""
    return name != LOCK_NAME and not name.startswith(LAST_IP_PREFIX)


def _disk() -> StateFiles:
    """The node's files, for callers outside a plugin call (the daemon's warm-up, tests)."""
    from pycni.skel.host import REAL_HOST

    return REAL_HOST.state()


def read_owner(path: str, files: StateFiles | None = None) -> str | None:
    """The trimmed content of one reservation file; None when it cannot be read."""
    try:
        raw = (files or _disk()).read(path)
    except OSError:
        return None
    return go_trim(raw[:_READ_MAX].decode("utf-8", errors="surrogateescape"))


def warm_indexes(journal: str) -> list[str]:
    """The daemon at start: index again the directories it indexed before (index.py)."""
    return REGISTRY.warm(journal, read_owner, is_reservation_name)


class Store:
    """One network's directory in ``files`` (default: the node's disk); open it for the
    duration of a call, then ``close``."""

    def __init__(
        self, network: str, data_dir: str, *, create: bool = True, files: StateFiles | None = None
    ) -> None:
        self.fs = files or _disk()
        self.dir = os.path.join(data_dir, network)
        self._lock: FileLock | None = None
        self._held = False
        if create:
            lock = os.path.join(self.dir, LOCK_NAME)
            # The directory exists on every call but a network's first: open the lock
            # directly (one stat per call less); any failure makes the directories as
            # before, so the error raised is the same.
            try:
                self._lock = self.fs.open_lock(lock, mode=0o750)
            except OSError:
                self.fs.make_dirs(self.dir, mode=0o755)
                self._lock = self.fs.open_lock(lock, mode=0o750)

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def read_owner(self, path: str) -> str | None:
        """The trimmed content of one reservation file; None when it cannot be read."""
        return read_owner(path, self.fs)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the network's exclusive flock (the reference's per-range-set lock)."""
        lock = self._lock
        if lock is None:
            yield
            return
        lock.acquire()
        self._held = True
        try:
            yield
        finally:
            self._held = False
            lock.release()

    def _index(self) -> DirIndex | None:
        """The in-memory owner index of this directory (see index.py), only under the lock;
        None means: scan the files."""
        if not self._held or not self.fs.on_disk:
            return None
        return REGISTRY.owners(self.dir, self.read_owner, is_reservation_name)

    # -- reservations --------------------------------------------------------------------

    def remove(self, path: str) -> None:
        """Unlink one reservation file (GC)."""
        self.fs.remove(path)

    def is_dir(self) -> bool:
        return self.fs.is_dir(self.dir)

    def unwritable(self) -> str:
        """Why reservations could not be written here ("" when they could): STATUS."""
        return self.fs.unwritable(self.dir)

    def path_of(self, address: IPAddress) -> str:
        return os.path.join(self.dir, str(address))

    def reserve(self, container_id: str, ifname: str, address: IPAddress, set_index: int) -> bool:
        """Create the reservation file; False when the address is already taken.

        Crash-safe: the file is created with O_EXCL (the reference's exclusive create) and
        fsynced, ``last_reserved_ip`` is replaced atomically, then one fsync of the directory
        makes both names durable before the address is handed out.
        """
        data = owner_key(container_id, ifname).encode()
        if not self.fs.create_exclusive(self.path_of(address), data, mode=0o600):
            return False
        self.write_last_reserved(set_index, address)
        self.fs.sync_dir(self.dir)
        return True

    def write_last_reserved(self, set_index: int, address: IPAddress) -> None:
        """Replace ``last_reserved_ip.<set>`` atomically (temp file + rename).

        It is only where the next search starts, so its bytes are not fsynced: after a power
        cut it may be missing or empty, and the search starts over (the reader allows that).
        The temp file's name starts with the same prefix, so no reader takes it for a
        reservation even if a crash leaves it behind (GC removes it after the grace period).
        """
        path = os.path.join(self.dir, f"{LAST_IP_PREFIX}{set_index}")
        self.fs.write_atomic(
            path,
            str(address).encode(),
            mode=0o600,
            durable=False,
            make_dirs=False,
            prefix=f"{LAST_IP_PREFIX}tmp-",
        )

    def last_reserved(self, set_index: int) -> IPAddress | None:
        """The recorded last address of a set; None when missing or unparsable.

        Like the reference the raw content is parsed, so any stray whitespace makes the
        round-robin start over. Read errors other than ENOENT propagate.
        """
        path = os.path.join(self.dir, f"{LAST_IP_PREFIX}{set_index}")
        try:
            raw = self.fs.read(path)
        except FileNotFoundError:
            return None
        try:
            return ipmath.parse_ip(raw.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return None

    def files(self) -> Iterator[tuple[str, str, str]]:
        """(path, name, trimmed content) of every reservation file, walking the whole tree."""
        for path in self.fs.walk_files(self.dir):
            name = os.path.basename(path)
            if not is_reservation_name(name):
                continue
            content = self.read_owner(path)
            if content is not None:
                yield path, name, content

    def _owned(self, key: str, index: DirIndex | None) -> Iterator[tuple[str, str]]:
        """(path, name) of every reservation file whose content is ``key``, from ``index``
        (``_index()``, taken once per lookup of an attachment: each costs a stat and a read
        of the event queue) or, when None, a scan."""
        if index is not None:
            for name in sorted(index.owners.get(key, ())):
                yield os.path.join(self.dir, name), name
            return
        for path, name, content in self.files():
            if content == key:
                yield path, name

    def get_by_id(self, container_id: str, ifname: str) -> list[IPAddress]:
        """Addresses held by this attachment, or by a legacy file holding only the ID."""
        key, legacy = owner_key(container_id, ifname), go_trim(container_id)
        out: list[IPAddress] = []
        index = self._index()
        for owner in dict.fromkeys((key, legacy)):
            for _path, name in self._owned(owner, index):
                try:
                    out.append(ipmath.parse_ip(name))
                except ValueError:
                    continue
        return out

    def find_by_id(self, container_id: str, ifname: str) -> bool:
        """True when any file belongs to the attachment (or, legacy, to the container)."""
        key, legacy = owner_key(container_id, ifname), go_trim(container_id)
        with self.locked():
            index = self._index()
            return any(True for owner in (key, legacy) for _ in self._owned(owner, index))

    def release_by_id(self, container_id: str, ifname: str) -> None:
        """Delete every file of the attachment; if none, every legacy file of the container."""
        if not self._release_matching(owner_key(container_id, ifname)):
            self._release_matching(go_trim(container_id))

    def _release_matching(self, key: str) -> bool:
        found = False
        for path, _name in list(self._owned(key, self._index())):
            try:
                self.fs.remove(path)
            except OSError:
                continue  # as the reference: tolerate and go on releasing
            found = True
        return found

    def reserved_addresses(self) -> list[IPAddress]:
        """Every address with a reservation file (top level only, names that parse)."""
        out: list[IPAddress] = []
        try:
            names = self.fs.list_dir(self.dir)
        except FileNotFoundError:
            return out
        for name in names:
            if not is_reservation_name(name):
                continue
            try:
                out.append(ipmath.parse_ip(name))
            except ValueError:
                continue
        return out
