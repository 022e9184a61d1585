"""The one place that opens rtnetlink sockets (pyroute2), bound to the thread's namespace.

A socket belongs to the network namespace the thread was in when it was opened, so
callers open it after entering the namespace they want to work on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyroute2 import IPRoute


@contextmanager
def rtnl() -> Iterator[Any]:
    """An rtnetlink socket in the current thread's network namespace."""
    ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()
