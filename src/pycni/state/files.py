"""The StateFiles Protocol: the file operations plugins make on the state they keep.

Only what the plugins use: read; replace atomically (optionally durable: file and directory
fsynced); create exclusively (O_EXCL, the reference store's "one owner per name"); append and
plain writes that never follow a symlink; remove, rename, list, walk; make directories with a
mode on every missing level (Go's MkdirAll); flock a lock file. Errors are OSError subclasses
as the os module raises them (FileNotFoundError, FileExistsError, NotADirectoryError...), so
callers keep their Go-compatible messages. Paths are absolute strings.

The real one is pycni.state.disk (``DISK``); the fake pycni.state.fake_files.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # typing is not imported at run time


class FileLock(Protocol):
    """An open lock file: ``acquire`` blocks for the exclusive flock, ``release`` drops it."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...

    def is_current(self) -> bool:
        """The path still names the file this lock is on (not removed or replaced)."""
        ...

    def close(self) -> None: ...


class StateFiles(Protocol):
    """A plugin's state on the node (see the module docstring)."""

    @property
    def on_disk(self) -> bool:
        """True when paths are the machine's files (so a cache over them, such as host-local's
        inotify index, may be used); False for an in-memory fake."""
        ...

    def read(self, path: str, *, nofollow: bool = False) -> bytes:
        """The file's bytes; with ``nofollow`` a symlink at ``path`` is refused (ELOOP)."""
        ...

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
        """Replace ``path`` (temp file named with ``prefix`` + rename): readers see the old
        bytes or the new, never half; ``durable`` fsyncs the file and then the directory."""
        ...

    def create_exclusive(
        self, path: str, data: bytes, *, mode: int = 0o600, durable: bool = True
    ) -> bool:
        """Create ``path`` holding ``data`` only if it does not exist (False when it does);
        ``durable`` fsyncs the file (the caller syncs the directory, ``sync_dir``)."""
        ...

    def write(self, path: str, data: bytes, *, mode: int = 0o644, append: bool = False) -> None:
        """Write in place (truncating, or appending), creating with ``mode``; never through
        a symlink."""
        ...

    def sync_dir(self, directory: str) -> None:
        """Make the entries created, renamed or removed in ``directory`` durable."""
        ...

    def remove(self, path: str) -> None:
        """Unlink a file (FileNotFoundError when there is none)."""
        ...

    def remove_dir(self, path: str) -> None:
        """Remove an empty directory (OSError when it is not empty or not there)."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` over ``dst`` (os.replace)."""
        ...

    def list_dir(self, directory: str) -> list[str]:
        """The names in ``directory``, unsorted (FileNotFoundError when it is not there)."""
        ...

    def walk_files(self, directory: str) -> list[str]:
        """The path of every non-directory below ``directory``, at any depth (os.walk; none
        when it is not there)."""
        ...

    def is_dir(self, path: str) -> bool: ...

    def make_dirs(self, path: str, *, mode: int) -> None:
        """Create ``path`` and every missing parent, each with ``mode`` (Go's MkdirAll)."""
        ...

    def open_lock(self, path: str, *, mode: int = 0o750, create: bool = True) -> FileLock:
        """Open (with ``create``: make) the lock file ``path``, never through a symlink;
        FileNotFoundError without ``create`` when it is missing."""
        ...

    def unsafe_dir(self, root: str, tail: tuple[str, ...], *, create: bool) -> str:
        """Why ``root/tail…`` may not be trusted ("" when it may): every directory from ``/``
        owned by root (or a non-root caller itself), not writable by others unless sticky,
        no symlink in ``tail`` nor one an untrusted user made in ``root``
        (fsutil.open_dir_nofollow). With ``create`` missing directories are made (0700)."""
        ...

    def remove_tree(self, root: str, tail: tuple[str, ...], name: str) -> None:
        """Remove ``root/tail…/name`` and everything in it without following any symlink
        (missing is fine; a symlink or file at ``name`` is refused: OSError)."""
        ...

    def remove_empty_dirs(self, root: str, tail: tuple[str, ...], names: tuple[str, ...]) -> None:
        """Remove the directories ``root/tail…/names[0]/names[1]…`` innermost first, each only
        when empty (OSError at the first that is not), through directory fds."""
        ...

    def unwritable(self, path: str) -> str:
        """Why files could not be created under ``path`` ("" when they could): checked on
        ``path`` or, when it is not there yet, the nearest directory above it."""
        ...
