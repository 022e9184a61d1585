"""StateFiles over the machine's file system (pycni.fsutil where it already does the job)."""

from __future__ import annotations

import os

from pycni import fsutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.state.files import FileLock, StateFiles


class DiskLock:
    """flock(LOCK_EX) on an open lock file."""

    __slots__ = ("_fd", "_path")

    def __init__(self, path: str, fd: int) -> None:
        self._path = path
        self._fd = fd

    def acquire(self) -> None:
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def is_current(self) -> bool:
        try:
            return os.stat(self._path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class DiskStateFiles:
    """The node's files: what every plugin call on the real host is handed."""

    __slots__ = ()

    @property
    def on_disk(self) -> bool:
        return True

    def read(self, path: str, *, nofollow: bool = False) -> bytes:
        # os-level I/O: cheaper than open() when many small files are read (host-local)
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0)
        fd = os.open(path, flags)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

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
        fsutil.write_atomic(
            path,
            data,
            mode=mode,
            dir_mode=dir_mode,
            fsync=durable,
            make_dirs=make_dirs,
            prefix=prefix,
        )

    def create_exclusive(
        self, path: str, data: bytes, *, mode: int = 0o600, durable: bool = True
    ) -> bool:
        return fsutil.create_exclusive(path, data, mode=mode, fsync=durable)

    def write(self, path: str, data: bytes, *, mode: int = 0o644, append: bool = False) -> None:
        how = os.O_APPEND if append else os.O_TRUNC
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | how, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def sync_dir(self, directory: str) -> None:
        fsutil.fsync_dir(directory)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def remove_dir(self, path: str) -> None:
        os.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def list_dir(self, directory: str) -> list[str]:
        return os.listdir(directory)

    def walk_files(self, directory: str) -> list[str]:
        return [
            os.path.join(base, name) for base, _dirs, names in os.walk(directory) for name in names
        ]

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def make_dirs(self, path: str, *, mode: int) -> None:
        missing = []
        while not os.path.isdir(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        for directory in reversed(missing):
            try:
                os.mkdir(directory, mode)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise

    def open_lock(self, path: str, *, mode: int = 0o750, create: bool = True) -> FileLock:
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
        return DiskLock(path, os.open(path, flags, mode))

    def unsafe_dir(self, root: str, tail: tuple[str, ...], *, create: bool) -> str:
        try:
            fd = fsutil.open_dir_nofollow(root, tail, create=create)
        except fsutil.UnsafePathError as exc:
            return str(exc)
        if fd is not None:
            os.close(fd)
        return ""

    def remove_tree(self, root: str, tail: tuple[str, ...], name: str) -> None:
        fsutil.remove_tree_nofollow(root, tail, name)

    def remove_empty_dirs(self, root: str, tail: tuple[str, ...], names: tuple[str, ...]) -> None:
        parent = fsutil.open_dir_nofollow(root, tail)
        if parent is None:
            return
        fds = [parent]
        try:
            for name in names[:-1]:
                try:
                    fds.append(os.open(name, fsutil.DIR_NOFOLLOW, dir_fd=fds[-1]))
                except FileNotFoundError:
                    return
            for depth in range(len(names) - 1, -1, -1):
                try:
                    os.rmdir(names[depth], dir_fd=fds[depth])
                except FileNotFoundError:
                    continue
        finally:
            for fd in fds:
                os.close(fd)

    def unwritable(self, path: str) -> str:
        found = path
        while not os.path.lexists(found):
            parent = os.path.dirname(found)
            if parent == found:
                break
            found = parent
        if not os.path.isdir(found):
            return f"cannot be made: {found} is not a directory"
        if not os.access(found, os.W_OK | os.X_OK):  # root too, on a read-only file system
            return f"cannot be written: {found} is read-only"
        return ""


DISK = DiskStateFiles()

if TYPE_CHECKING:
    _check: type[StateFiles] = DiskStateFiles  # mypy proves it satisfies the Protocol
