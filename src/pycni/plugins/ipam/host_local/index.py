"""Who holds which address, without reading every reservation file on each ADD and DEL.

The store's layout is the reference's (a file per address, named by it, holding the owner),
so "which addresses does this attachment hold" has no answer on disk but a scan of every file,
whose cost grows an ADD and a DEL with the pods (docs/benchmarks.md). A
long-lived process (the daemon) therefore keeps, per network directory, the owner of every
reservation in memory and keeps it exact with inotify: every create, write, delete or rename
in the directory, by us, by another pycni process or by the Go binary, queues an event; the
queue is drained, and only the files it names are read again, each time the store is used
under its lock. Writers take the same lock and the kernel queues an event before the write
returns, so what the lock holder sees is complete. Any doubt (queue overflow, the directory
replaced or gone, a subdirectory, no inotify) falls back to scanning the files, as before.

Building an index reads every file once (docs/benchmarks.md). So that a restarted
daemon's first call does not pay it, the daemon keeps a journal of the directories it indexed
(in its own root-only socket directory) and builds their indexes again when it starts
(:meth:`Registry.warm`), before or while its first calls arrive.
"""

from __future__ import annotations

import _thread  # threading.Lock is _thread.allocate_lock; threading costs an import
import contextlib
import ctypes
import os
import stat
import struct
from collections.abc import Callable, Iterator

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
_EVENT = struct.Struct("=iIII")
_READ_MAX = 1 << 16

Reader = Callable[[str], str | None]


class _Inotify:
    """One inotify instance for the whole process (instances are a scarce per-user resource)."""

    def __init__(self) -> None:
        # The process's own symbols (libc is linked in), as net/ns.py does: find_library()
        # would run ``ldconfig -p`` in a child process on every plugin call.
        libc = ctypes.CDLL(None, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd = int(fd)

    def watch(self, path: str) -> int:
        wd = int(self._add(self.fd, os.fsencode(path), WATCH_MASK))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return wd

    def unwatch(self, wd: int) -> None:
        self._rm(self.fd, wd)

    def reads(self) -> Iterator[bytes]:
        """The queued events, raw (``inotify_event`` records), without blocking."""
        while True:
            try:
                yield os.read(self.fd, _READ_MAX)
            except BlockingIOError:
                return


class DirIndex:
    """name -> trimmed content of the reservation files of one directory, and the reverse."""

    def __init__(self, path: str, wd: int, ident: tuple[int, int]) -> None:
        self.path = path
        self.wd = wd
        self.ident = ident
        self.valid = False
        # names (raw: NUL-padded bytes, as the events carry them) to read again
        self.dirty: set[bytes] = set()
        self.content: dict[str, str] = {}
        self.owners: dict[str, set[str]] = {}

    def _set(self, name: str, content: str | None) -> None:
        old = self.content.pop(name, None)
        if old is not None:
            names = self.owners.get(old)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.owners[old]
        if content is not None:
            self.content[name] = content
            self.owners.setdefault(content, set()).add(name)

    def rebuild(self, reader: Reader, is_entry: Callable[[str], bool]) -> bool:
        """Read every file once; False when the directory has subdirectories (the reference
        walks them, so the index would not be the whole answer)."""
        self.content.clear()
        self.owners.clear()
        self.dirty.clear()
        with os.scandir(self.path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    return False
                if is_entry(entry.name):
                    self._set(entry.name, reader(entry.path))
        self.valid = True
        return True

    def refresh(self, reader: Reader, is_entry: Callable[[str], bool]) -> None:
        """Read again the files named by events. Bookkeeping files (``last_reserved_ip.*``
        and its temp files, written by every ADD) are skipped as ``rebuild`` skips them:
        reading them cost each ADD two opens, and put them in the index as if they were
        reservations."""
        for raw in self.dirty:
            name = os.fsdecode(raw.rstrip(b"\0"))
            if is_entry(name):
                self._set(name, reader(os.path.join(self.path, name)))
        self.dirty.clear()


class Registry:
    """The indexes of this process, one per directory, kept current by one inotify fd."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._inotify: _Inotify | None = None
        self._broken = False
        self._by_path: dict[str, DirIndex] = {}
        self._by_wd: dict[int, DirIndex] = {}
        self.journal = ""  # a file listing the directories indexed (the daemon's), or none
        self._journaled: set[str] = set()

    def _notify(self) -> _Inotify | None:
        if self._inotify is None and not self._broken:
            try:
                self._inotify = _Inotify()
            except (OSError, AttributeError):
                self._broken = True  # no inotify here: callers scan
        return self._inotify

    def _drain(self, notify: _Inotify) -> None:
        # One flat loop over the raw records, names kept as bytes and decoded once per
        # name in refresh: an ADD finds ~9 events of the previous one queued (create,
        # write, close, the last_reserved_ip rename), and a generator decoding each made
        # the lookup after an ADD ~10% slower (60 -> 54 us measured, tmpfs).
        unpack = _EVENT.unpack_from
        size = _EVENT.size
        by_wd = self._by_wd
        for data in notify.reads():
            offset = 0
            end = len(data)
            while offset + size <= end:
                wd, mask, _cookie, length = unpack(data, offset)
                start = offset + size
                offset = start + length
                if mask & IN_Q_OVERFLOW:
                    for each in by_wd.values():
                        each.valid = False
                    continue
                index = by_wd.get(wd)
                if index is None:
                    continue
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                    self._forget(notify, index)  # the next use watches the path afresh
                elif mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    index.valid = False
                elif length and data[start]:
                    index.dirty.add(data[start:offset])

    def owners(self, path: str, reader: Reader, is_entry: Callable[[str], bool]) -> DirIndex | None:
        """The current index of ``path`` (call with the store's lock held), or None when the
        caller must scan the files itself."""
        with self._lock:
            notify = self._notify()
            if notify is None:
                return None
            try:
                st = os.stat(path)
            except OSError:
                return None
            ident = (st.st_dev, st.st_ino)
            self._drain(notify)
            index = self._by_path.get(path)
            if index is not None and index.ident != ident:
                self._forget(notify, index)
                index = None
            if index is None:
                try:
                    wd = notify.watch(path)
                except OSError:
                    return None  # e.g. out of watches (ENOSPC): scan
                index = DirIndex(path, wd, ident)
                self._by_path[path] = index
                self._by_wd[wd] = index
                self._remember(path)
            if not index.valid:
                if not index.rebuild(reader, is_entry):
                    return None
                self._drain(notify)  # events of the rebuild's own window, if any
            index.refresh(reader, is_entry)
            return index

    def _remember(self, path: str) -> None:
        """Append a newly indexed directory to the journal (best effort: a lost line costs
        the next daemon one scan of that directory on its first call, as before)."""
        if not self.journal or path in self._journaled or not _journal_safe(path):
            return
        self._journaled.add(path)
        try:
            fd = os.open(
                self.journal,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
            try:
                os.write(fd, os.fsencode(path) + b"\n")
            finally:
                os.close(fd)
        except OSError:
            return

    def warm(
        self, journal: str, reader: Reader, is_entry: Callable[[str], bool], limit: int = 64
    ) -> list[str]:
        """Build the index of every directory in ``journal`` that still exists (at most
        ``limit``), rewrite the journal with those, and keep appending to it. Correct without
        the stores' locks: the directory is watched before its files are read, and what
        changes meanwhile is read again under the lock by the call that uses the index."""
        try:
            fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                raw = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
        except OSError:
            raw = b""
        paths: list[str] = []
        for line in raw.split(b"\n"):
            path = os.fsdecode(line)
            if len(paths) >= limit:
                break
            if path in paths or not _journal_safe(path) or not _plain_dir(path):
                continue
            paths.append(path)
        tmp = journal + ".new"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, b"".join(os.fsencode(p) + b"\n" for p in paths))
            finally:
                os.close(fd)
            os.replace(tmp, journal)
        except OSError:
            pass
        with self._lock:
            self.journal = journal
            self._journaled = set(paths)
        built = []
        for path in paths:
            if self.owners(path, reader, is_entry) is not None:
                built.append(path)
        return built

    def _forget(self, notify: _Inotify, index: DirIndex) -> None:
        if self._by_path.get(index.path) is index:
            del self._by_path[index.path]
        if self._by_wd.pop(index.wd, None) is not None:
            notify.unwatch(index.wd)  # an already removed watch just fails: ignored


def _journal_safe(path: str) -> bool:
    """An absolute path of one line: what a journal line can hold and be read back as."""
    return os.path.isabs(path) and "\n" not in path and "\0" not in path and len(path) < 4096


def _plain_dir(path: str) -> bool:
    """A directory itself, not a symlink to one (the journal is the daemon's own file, but a
    directory may have been replaced since it was written)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


REGISTRY = Registry()
