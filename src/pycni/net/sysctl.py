"""The /proc/sys/net entries of one network namespace, as a value a plugin is handed.

sysctls under net/ belong to a network namespace, like links and routes: a plugin that writes
``net/ipv6/conf/eth0/accept_ra`` means the namespace it is working on. ``Sysctl`` is that
per-namespace view, so the plugins and the net/ helpers they call (addr, bridge, veth) take
one beside their ``Kernel`` instead of reaching for /proc themselves: the real one,
``THREAD``, is pycni.net.thread_sysctl (it acts on the calling thread's namespace, which the plugin
seam, pycni.skel.host, keeps equal to the Kernel's namespace for the block it hands out);
the fake one is each FakeNetns's ``sysctl`` (pycni.net.netlink.fake_kernel). Names are in
slash form relative to /proc/sys (``net/ipv4/ip_forward``), as every caller writes them.
"""

from __future__ import annotations

from pycni.net import thread_sysctl as _proc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from pycni.net.netlink.kernel import Kernel
else:
    Protocol = object  # typing is not imported at run time


class Sysctl(Protocol):
    """The sysctls of one network namespace; refusals are OSError (ENOENT: no such entry)."""

    def read(self, name: str) -> str: ...

    def write(self, name: str, value: str) -> None: ...


class ThreadSysctl:
    """The calling thread's namespace, through /proc/sys (pycni.net.thread_sysctl)."""

    __slots__ = ()

    def read(self, name: str) -> str:
        return _proc.read(name)

    def write(self, name: str, value: str) -> None:
        _proc.write(name, value)


THREAD = ThreadSysctl()


def try_write(sysctl: Sysctl, name: str, value: str) -> None:
    """Best effort (e.g. an IPv6 knob on a node with IPv6 disabled), as the reference."""
    try:
        sysctl.write(name, value)
    except OSError:
        return


def enable_forwarding(kernel: Kernel, sysctl: Sysctl, version: int) -> None:
    """ip_forward for IPv4, conf/all/forwarding for IPv6 (pkg/ip's EnableIP4/6Forward), in the
    namespace of ``kernel`` and ``sysctl``.

    The current value is read over netlink (RTM_GETNETCONF): a /proc/sys/net/ipv4 open walks
    past an entry per namespace that ever looked at it (docs/benchmarks.md). Only a needed
    write, or a kernel that does not answer, goes to the sysctl."""
    from pycni.net.netlink.kernel import NetlinkError, family_of

    name = "net/ipv4/ip_forward" if version == 4 else "net/ipv6/conf/all/forwarding"
    try:
        if kernel.forwarding(family_of(version)) == 1:
            return
    except NetlinkError:
        pass  # e.g. IPv6 off: the sysctl answers as it always did
    if sysctl.read(name) != "1":
        sysctl.write(name, "1")
