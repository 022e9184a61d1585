"""Finding the command-line tools a plugin call may run (iptables-restore, nft, …).

An exec'd plugin looks tools up in its own PATH. In the daemon one process serves every
caller, so the framework sets the caller's PATH for the duration of each call (per thread)
and ``which`` uses it; outside a call it falls back to the process's PATH.
"""

from __future__ import annotations

import _thread
from collections.abc import Iterator
from contextlib import contextmanager

_local = _thread._local()  # threading.local, without importing threading


@contextmanager
def search_path(path: str | None) -> Iterator[None]:
    """Look tools up in ``path`` (a PATH string) on this thread inside the block."""
    previous = getattr(_local, "path", None)
    _local.path = path
    try:
        yield
    finally:
        _local.path = previous


def which(name: str) -> str | None:
    import shutil  # not imported by every plugin call: few of them run a tool

    return shutil.which(name, path=getattr(_local, "path", None))
