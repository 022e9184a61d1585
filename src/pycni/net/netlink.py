"""The one place that opens rtnetlink sockets, bound to the thread's namespace.

A socket belongs to the network namespace the thread was in when it was opened, so
callers open it after entering the namespace they want to work on. The socket is
pycni.net.rtnl's native client (pyroute2 only behind it, for calls it does not do itself);
PYCNI_NETLINK=pyroute2 gives a plain pyroute2 IPRoute.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pycni.net.rtnl import open_rtnl


@contextmanager
def rtnl() -> Iterator[Any]:
    """An rtnetlink socket in the current thread's network namespace."""
    ipr = open_rtnl()
    try:
        yield ipr
    finally:
        ipr.close()
