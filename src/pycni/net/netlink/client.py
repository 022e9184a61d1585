"""The one place that opens rtnetlink clients, bound to the thread's namespace.

A client belongs to the network namespace the thread was in when it was opened, so callers
open it after entering the namespace they want to work on. It is a pycni.net.netlink.kernel.Kernel:
the native client (pycni.net.netlink.rtnl.native), the only implementation on a real kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pycni.net.netlink.kernel import Kernel


def open_kernel() -> Kernel:
    """A Kernel of the calling thread's namespace (the caller closes it)."""
    from pycni.net.netlink.rtnl.native import NativeKernel

    return NativeKernel()


@contextmanager
def rtnl() -> Iterator[Kernel]:
    """A Kernel of the current thread's network namespace, closed on exit."""
    kernel = open_kernel()
    try:
        yield kernel
    finally:
        kernel.close()
