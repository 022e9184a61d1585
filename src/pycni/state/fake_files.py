"""FakeStateFiles: StateFiles in memory, for rootless tests of a plugin's state.

Files are bytes with a mode, directories a mode, both by absolute path; a lock file's flock is
held or not (taking it twice is an error: one test thread would deadlock on the real one).
It also models what survives a power cut, so a test can check durability: ``crash()`` keeps
only what was made durable, as the real file system promises: a file's bytes once fsynced
(``durable``) and its name once its directory was synced (``sync_dir``; ``write_atomic`` with
``durable`` does both). Directories are taken as durable once made. Nothing in pycni imports
this module; it lives in src/ to be type-checked with what it stands in for.
"""

from __future__ import annotations

import errno
import os
import posixpath

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import FileLock, StateFiles


def _error(kind: type[OSError], code: int, path: str) -> OSError:
    return kind(code, os.strerror(code), path)


class FakeLock:
    """The fake's flock on one lock file."""

    def __init__(self, files: FakeStateFiles, path: str) -> None:
        self._files = files
        self._path = path
        self._inode = files.inodes[path]
        self._held = False

    def acquire(self) -> None:
        if self._inode in self._files.held:
            raise AssertionError(f"{self._path}: flock taken twice (the real one would block)")
        self._files.held.add(self._inode)
        self._held = True

    def release(self) -> None:
        self._files.held.discard(self._inode)
        self._held = False

    def is_current(self) -> bool:
        return self._files.inodes.get(self._path) == self._inode

    def close(self) -> None:
        if self._held:
            self.release()
        self._files.open_locks.discard(self)


class FakeStateFiles:
    """In-memory files (``files``: path -> bytes, ``modes``: path -> mode), directories
    (``dirs``: path -> mode, "/" always there) and flocks; ``disk`` is what a crash keeps."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}
        self.dirs: dict[str, int] = {"/": 0o755}
        self.inodes: dict[str, int] = {}
        self.held: set[int] = set()
        self.open_locks: set[FakeLock] = set()
        self.synced: dict[str, bytes] = {}  # a file's bytes as last fsynced
        self.disk: dict[str, bytes] = {}  # the files a crash keeps
        self.readonly: set[str] = set()  # directories a test made unwritable
        self.unsafe: dict[str, str] = {}  # runtime directories a test made untrusted: why
        self._next_inode = 1

    # ------------------------------------------------------------ a test's views

    def tree(self, under: str = "/") -> dict[str, tuple[bytes, int]]:
        """path -> (bytes, mode) of every file below ``under``: what a test compares."""
        prefix = under.rstrip("/") + "/"
        return {
            p: (b, self.modes[p]) for p, b in sorted(self.files.items()) if p.startswith(prefix)
        }

    def crash(self) -> None:
        """The machine loses power and comes back: what was not durable is gone."""
        self.files = {p: b for p, b in self.disk.items() if posixpath.dirname(p) in self.dirs}
        self.modes = {p: self.modes.get(p, 0o600) for p in self.files}
        self.inodes = {p: self._inode() for p in self.files}
        self.held.clear()
        self.open_locks.clear()
        self.synced = dict(self.files)

    # ------------------------------------------------------------ helpers

    def _inode(self) -> int:
        self._next_inode += 1
        return self._next_inode

    def _parent(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"not an absolute path: {path!r}")
        parent = posixpath.dirname(posixpath.normpath(path))
        if parent not in self.dirs:
            if parent in self.files:
                raise _error(NotADirectoryError, errno.ENOTDIR, path)
            raise _error(FileNotFoundError, errno.ENOENT, path)
        if parent in self.readonly:
            raise _error(PermissionError, errno.EROFS, path)
        return parent

    def _put(self, path: str, data: bytes, mode: int) -> None:
        if path in self.dirs:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        if path not in self.files:
            self.inodes[path] = self._inode()
            self.modes[path] = mode
        self.files[path] = data
        self.synced.pop(path, None)

    # ------------------------------------------------------------ the StateFiles protocol

    @property
    def on_disk(self) -> bool:
        return False

    def read(self, path: str, *, nofollow: bool = False) -> bytes:
        path = posixpath.normpath(path)
        if path in self.dirs:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        found = self.files.get(path)
        if found is None:
            self._parent(path)  # ENOTDIR when a file is in the way
            raise _error(FileNotFoundError, errno.ENOENT, path)
        return found

    def write_atomic(
        self,
        path: str,
        data: bytes,
        *,
        mode: int = 0o600,
        dir_mode: int = 0o700,
        durable: bool = True,
        make_dirs: bool = True,
        prefix: str = ".tmp-",
    ) -> None:
        path = posixpath.normpath(path)
        if make_dirs:
            self.make_dirs(posixpath.dirname(path), mode=dir_mode)
        self._parent(path)
        if path in self.dirs:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        self.files[path] = data
        self.modes[path] = mode
        self.inodes[path] = self._inode()  # a rename over it: a new file
        if durable:
            self.synced[path] = data
            self.disk[path] = data
        else:
            self.synced.pop(path, None)

    def create_exclusive(
        self, path: str, data: bytes, *, mode: int = 0o600, durable: bool = True
    ) -> bool:
        path = posixpath.normpath(path)
        self._parent(path)
        if path in self.files or path in self.dirs:
            return False
        self._put(path, data, mode)
        if durable:
            self.synced[path] = data
        return True

    def write(self, path: str, data: bytes, *, mode: int = 0o644, append: bool = False) -> None:
        path = posixpath.normpath(path)
        self._parent(path)
        old = self.files.get(path, b"") if append else b""
        self._put(path, old + data, mode)

    def sync_dir(self, directory: str) -> None:
        directory = posixpath.normpath(directory)
        if directory not in self.dirs:
            raise _error(FileNotFoundError, errno.ENOENT, directory)
        for path in [p for p in self.disk if posixpath.dirname(p) == directory]:
            if path not in self.files:
                del self.disk[path]
        for path in self.files:
            if posixpath.dirname(path) == directory:
                # the name survives; its bytes only if they were fsynced, else empty
                self.disk[path] = self.synced.get(path, b"")

    def remove(self, path: str) -> None:
        path = posixpath.normpath(path)
        if path in self.dirs:
            raise _error(IsADirectoryError, errno.EISDIR, path)
        if path not in self.files:
            self._parent(path)
            raise _error(FileNotFoundError, errno.ENOENT, path)
        self._parent(path)  # EROFS in a read-only directory
        del self.files[path], self.modes[path], self.inodes[path]
        self.synced.pop(path, None)

    def remove_dir(self, path: str) -> None:
        path = posixpath.normpath(path)
        if path not in self.dirs:
            raise _error(FileNotFoundError, errno.ENOENT, path)
        prefix = path + "/"
        if any(p.startswith(prefix) for p in (*self.files, *self.dirs)):
            raise _error(OSError, errno.ENOTEMPTY, path)
        del self.dirs[path]

    def rename(self, src: str, dst: str) -> None:
        src, dst = posixpath.normpath(src), posixpath.normpath(dst)
        if src not in self.files:
            raise _error(FileNotFoundError, errno.ENOENT, src)
        self._parent(dst)
        self.files[dst] = self.files.pop(src)
        self.modes[dst] = self.modes.pop(src)
        self.inodes[dst] = self.inodes.pop(src)
        if src in self.synced:
            self.synced[dst] = self.synced.pop(src)

    def list_dir(self, directory: str) -> list[str]:
        directory = posixpath.normpath(directory)
        if directory not in self.dirs:
            if directory in self.files:
                raise _error(NotADirectoryError, errno.ENOTDIR, directory)
            raise _error(FileNotFoundError, errno.ENOENT, directory)
        return [
            posixpath.basename(p)
            for p in (*self.files, *self.dirs)
            if p != "/" and posixpath.dirname(p) == directory
        ]

    def walk_files(self, directory: str) -> list[str]:
        prefix = posixpath.normpath(directory).rstrip("/") + "/"
        return [p for p in self.files if p.startswith(prefix)]

    def is_dir(self, path: str) -> bool:
        return posixpath.normpath(path) in self.dirs

    def make_dirs(self, path: str, *, mode: int) -> None:
        path = posixpath.normpath(path)
        missing = []
        while path not in self.dirs:
            if path in self.files:
                raise _error(FileExistsError, errno.EEXIST, path)
            missing.append(path)
            path = posixpath.dirname(path)
        if path in self.readonly and missing:
            raise _error(PermissionError, errno.EROFS, missing[-1])
        for directory in reversed(missing):
            self.dirs[directory] = mode

    def open_lock(self, path: str, *, mode: int = 0o750, create: bool = True) -> FileLock:
        path = posixpath.normpath(path)
        if path not in self.files:
            if not create:
                self._parent(path)
                raise _error(FileNotFoundError, errno.ENOENT, path)
            self.create_exclusive(path, b"", mode=mode, durable=False)
        lock = FakeLock(self, path)
        self.open_locks.add(lock)
        return lock

    def unsafe_dir(self, root: str, tail: tuple[str, ...], *, create: bool) -> str:
        why = self.unsafe.get(posixpath.normpath(root))
        if why:
            return why
        if create:
            self.make_dirs(posixpath.join(root, *tail), mode=0o700)
        return ""

    def remove_tree(self, root: str, tail: tuple[str, ...], name: str) -> None:
        path = posixpath.normpath(posixpath.join(root, *tail, name))
        if path in self.files:
            from pycni.fsutil import UnsafePathError  # what the disk raises

            raise UnsafePathError(f"{path} is not a directory: kept")
        if path not in self.dirs:
            return
        prefix = path + "/"
        for each in [p for p in self.files if p.startswith(prefix)]:
            self.remove(each)
        for each in sorted((d for d in self.dirs if d.startswith(prefix)), reverse=True):
            del self.dirs[each]
        del self.dirs[path]

    def remove_empty_dirs(self, root: str, tail: tuple[str, ...], names: tuple[str, ...]) -> None:
        for depth in range(len(names), 0, -1):
            path = posixpath.normpath(posixpath.join(root, *tail, *names[:depth]))
            if path in self.dirs:
                self.remove_dir(path)

    def unwritable(self, path: str) -> str:
        found = posixpath.normpath(path)
        while found not in self.dirs and found not in self.files:
            found = posixpath.dirname(found)
        if found not in self.dirs:
            return f"cannot be made: {found} is not a directory"
        if found in self.readonly:
            return f"cannot be written: {found} is read-only"
        return ""


if TYPE_CHECKING:
    _check: type[StateFiles] = FakeStateFiles  # mypy proves it satisfies the Protocol
