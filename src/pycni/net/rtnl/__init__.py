"""A small synchronous rtnetlink client for the ADD/DEL hot path, with pyroute2 behind it.

Measured (see docs/architecture.md): pyroute2 0.9 runs an asyncio loop for every synchronous
call, ~0.25-0.4 ms of CPU per request, and a bridge ADD makes ~35 of them; importing it costs
~180 ms, most of an in-process plugin run. ``open_rtnl()`` returns a HybridIPRoute that does
the calls the plugins' hot paths make on a raw netlink socket and hands every other call to a
real pyroute2 IPRoute, opened only then, in the namespace of the raw socket.
"""

from __future__ import annotations

import os
from typing import Any

from pycni.net.rtnl.hybrid import HybridIPRoute
from pycni.net.rtnl.wire import RtnlError

__all__ = ["HybridIPRoute", "RtnlError", "open_rtnl"]

BACKEND_ENV = "PYCNI_NETLINK"


def open_rtnl() -> Any:
    """An IPRoute-like socket in the calling thread's namespace; PYCNI_NETLINK=pyroute2
    gives a plain pyroute2 IPRoute instead (the behaviour before this client existed)."""
    if os.environ.get(BACKEND_ENV, "") == "pyroute2":
        from pyroute2 import IPRoute

        return IPRoute()
    return HybridIPRoute()
