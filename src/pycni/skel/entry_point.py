"""The bytes that identify a pycni entry point on disk, and the check for them.

Every executable that ``pycni plugins install`` writes (the C forwarder or the Python
forwarder script) contains ``ENTRY_MARKER``. Delegation (skel/delegate.py) checks an IPAM
delegate found in CNI_PATH for it and, when present, runs that pycni plugin in-process
instead of exec'ing it. The installer (entrypoints/) imports the marker from here: skel/ never
imports entrypoints/ or daemon/.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ENTRY_MARKER", "is_entry_point", "is_pycni_entry_point"]

ENTRY_MARKER = b"pycni-entry-point:v1"

# Entry points are small (a few KiB of script or a ~700 KiB static binary).
_SCAN_LIMIT = 1 << 20

_cache: dict[tuple[str, int, int], bool] = {}


def is_entry_point(path: str | Path) -> bool:
    """True when ``path`` is a regular file that carries the pycni entry-point marker."""
    try:
        with open(path, "rb") as f:
            data = f.read(_SCAN_LIMIT)
    except OSError:
        return False
    return ENTRY_MARKER in data


def is_pycni_entry_point(path: str) -> bool:
    """``is_entry_point``, cached by path, inode and mtime (delegation asks on every call)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (path, st.st_ino, st.st_mtime_ns)
    cached = _cache.get(key)
    if cached is None:
        cached = is_entry_point(path)
        _cache[key] = cached
    return cached
