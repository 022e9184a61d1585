"""The bytes that identify a pycni entry point on disk.

Every executable that ``pycni plugins install`` writes (the C forwarder or the Python
forwarder script) contains ``ENTRY_MARKER``. The plugin framework checks an IPAM delegate
found in CNI_PATH for it and, when present, runs that pycni plugin in-process instead of
exec'ing it.
"""

from __future__ import annotations

from pathlib import Path

ENTRY_MARKER = b"pycni-entry-point:v1"

# Entry points are small (a few KiB of script or a ~20 KiB binary); never read more than this.
_SCAN_LIMIT = 1 << 20


def is_entry_point(path: str | Path) -> bool:
    """True when ``path`` is a regular file that carries the pycni entry-point marker."""
    try:
        with open(path, "rb") as f:
            data = f.read(_SCAN_LIMIT)
    except OSError:
        return False
    return ENTRY_MARKER in data
