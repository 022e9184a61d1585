"""Small file-system helpers shared by the runtime, the plugins and the cluster tools."""

from __future__ import annotations

import contextlib
import os
import tempfile


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
    scanners skip it), optionally fsynced, get ``mode`` and are renamed over ``path``.  On any
    failure the temporary file is removed and the old file stays as it was.  ``make_dirs``
    creates a missing parent directory, the last level with ``dir_mode``.  ``str`` is UTF-8.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    if make_dirs:
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
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
