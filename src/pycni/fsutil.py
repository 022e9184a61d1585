"""Small file-system helpers shared by the runtime, the plugins and the cluster tools."""

from __future__ import annotations

import contextlib
import os


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int = 0o600,
    dir_mode: int = 0o700,
    fsync: bool = True,
    make_dirs: bool = True,
    prefix: str = ".tmp-",
) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old file or the new one, never half.

    State files (result cache, tuning backups, flannel's subnet.env, lease records) are read by
    another process or by the next CNI call, possibly after a crash, so nothing is written in
    place: the bytes go to a temporary file in the same directory (``prefix`` lets directory
    scanners skip it), get ``mode`` and are renamed over ``path``.  With ``fsync`` the file is
    fsynced before the rename and the directory after it, so once this returns the new file
    survives a power cut (a rename alone is atomic against a kill, not against a crash of the
    machine).  On any failure the temporary file is removed and the old file stays as it was.
    ``make_dirs`` creates a missing parent directory, the last level with ``dir_mode``.
    ``str`` is UTF-8.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    if make_dirs:
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = _make_temp(directory, prefix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(directory)


def _make_temp(directory: str, prefix: str) -> tuple[int, str]:
    """``tempfile.mkstemp`` (a new 0600 file, O_EXCL, no symlink followed), without importing
    tempfile: it loads shutil, bz2, lzma and random, a cost every plugin call would pay."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = os.path.join(directory, prefix + os.urandom(6).hex())
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary file name in {directory}")


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (a create, rename or unlink done in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_exclusive(
    path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600, fsync: bool = True
) -> bool:
    """Create ``path`` holding ``data`` only if it does not exist yet; False when it does.

    The create is O_EXCL (so two writers never both own the name, as host-local's reference
    store requires); the bytes are written and, with ``fsync``, the file is fsynced.  The
    caller fsyncs the directory (``fsync_dir``) once it has made all its entries, so one
    operation that creates several files pays for one directory sync.  A failed write removes
    the file again.
    """
    target = os.fspath(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise
    os.close(fd)
    return True
