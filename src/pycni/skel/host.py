"""The seam between a plugin and the machine: the kernels it works on are handed to it.

A plugin never opens netlink clients, /proc/sys entries or delegates itself: it asks its
request's ``host`` (``req.host``, a ``Host``) for

- ``node()``: a Kernel of the node, the namespace the plugin was called in;
- ``open_netns(path, fd)`` and ``pod(netns)``: a pod namespace, and a Kernel of it for a block
  during which this thread is inside it (setns: sysctls, tun ioctls and the like act on the
  thread's namespace, so the real host enters it, as ``with pod.entered(), rtnl()`` did);
- ``sysctl(kernel)``: the /proc/sys/net entries of that kernel's namespace
  (pycni.net.sysctl.Sysctl), valid inside the block that handed out the kernel;
- ``netfilter(kernel)``: nftables, iptables and conntrack of that kernel's namespace
  (pycni.net.netfilter.seam.Netfilter), valid inside the same block;
- ``delegate(req, type, command, stdin)``: another plugin's verb (IPAM);
- ``locked(netns)``: one run at a time on a pod (flock on its namespace file);
- ``selinux()``: the machine's SELinux (tap's ``selinuxContext``, pycni.skel.selinux);
- ``state()``: the files a plugin keeps between calls (pycni.state.files.StateFiles:
  host-local's reservations, tuning's backups, firewall's records, dnsname's files);
- ``processes()``: the child processes it starts and signals (pycni.process.processes
  .Processes: dnsname's dnsmasq).

``REAL_HOST`` is the machine itself (what skel gives every request); tests hand
pycni.skel.fake_host.FakeHost instead, an in-memory machine over
pycni.net.netlink.fake_kernel, so the ADD/CHECK/DEL logic of a plugin runs without root.
Nothing here is imported before it is used: a plugin's cold path pays for one small module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pycni.net.ns import NetNS, entered_fd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Protocol

    from pycni.net.netfilter.seam import Netfilter
    from pycni.net.netlink.kernel import Kernel
    from pycni.net.nsscan import LiveAddresses
    from pycni.net.sysctl import Sysctl
    from pycni.process.processes import Processes
    from pycni.skel.base import Request
    from pycni.skel.selinux import SELinux
    from pycni.spec.result import Result
    from pycni.state.files import StateFiles
else:
    Protocol = object  # typing is not imported at run time

__all__ = ["REAL_HOST", "Host", "RealHost"]


class Host(Protocol):
    """Where a plugin's kernel work lands (see the module docstring)."""

    def open_netns(self, path: str, fd: int | None = None) -> NetNS:
        """The pod namespace ``path`` (or the fd the caller was handed for it);
        NetNSNotFound when there is none."""
        ...

    def node_netns(self) -> NetNS:
        """The node's own namespace, as a handle calls that place links take."""
        ...

    def node(self) -> AbstractContextManager[Kernel]:
        """A Kernel of the node's namespace, closed when the block ends."""
        ...

    def pod(self, netns: NetNS) -> AbstractContextManager[Kernel]:
        """A Kernel of ``netns``, with this thread inside it until the block ends."""
        ...

    def sysctl(self, kernel: Kernel) -> Sysctl:
        """The sysctls of ``kernel``'s namespace (inside the block that gave ``kernel``)."""
        ...

    def netfilter(self, kernel: Kernel) -> Netfilter:
        """nftables, iptables and conntrack of ``kernel``'s namespace (inside the block that
        gave ``kernel``)."""
        ...

    def node_netfilter(self) -> Netfilter:
        """The node's netfilter, for a plugin that needs no Kernel of the node beside it
        (the firewall): ``netfilter(kernel)`` of the node without opening a Kernel."""
        ...

    def delegate(
        self, req: Request, plugin_type: str, command: str | None = None, stdin: bytes | None = None
    ) -> Result | None:
        """Run ``plugin_type``'s ``command`` (default: the request's) with the request's
        environment and ``stdin`` (default: its config): ADD's Result, None otherwise."""
        ...

    def locked(self, netns: NetNS) -> AbstractContextManager[None]:
        """Hold the pod's lock for the block: plugin runs on one pod (of any process) that
        take it never overlap."""
        ...

    def selinux(self) -> SELinux:
        """The machine's SELinux (pycni.skel.selinux): tap's ``selinuxContext``."""
        ...

    def state(self) -> StateFiles:
        """The node's state files (reservations, backups, records: pycni.state.files)."""
        ...

    def processes(self) -> Processes:
        """The node's processes, to start, look at and signal (pycni.process.processes)."""
        ...

    def live_addresses(self) -> LiveAddresses:
        """Every address configured in a live network namespace of the machine: what GC may
        not free whatever the runtime's list says (pycni.net.nsscan on the real host)."""
        ...


class RealHost:
    """The machine pycni runs on: rtnetlink clients, setns, /proc/sys, CNI_PATH."""

    __slots__ = ()

    def open_netns(self, path: str, fd: int | None = None) -> NetNS:
        if fd is not None:
            return NetNS.from_fd(fd, path)
        return NetNS.open(path)

    def node_netns(self) -> NetNS:
        return NetNS.current()

    def node(self) -> AbstractContextManager[Kernel]:
        from pycni.net.netlink.client import rtnl

        return rtnl()

    def pod(self, netns: NetNS) -> AbstractContextManager[Kernel]:
        return _inside(netns.fd)

    def sysctl(self, kernel: Kernel) -> Sysctl:
        from pycni.net.sysctl import THREAD

        return THREAD

    def netfilter(self, kernel: Kernel) -> Netfilter:
        from pycni.net.netfilter.seam import THREAD

        return THREAD

    def node_netfilter(self) -> Netfilter:
        from pycni.net.netfilter.seam import THREAD

        return THREAD  # a plugin call runs in the node's namespace

    def delegate(
        self, req: Request, plugin_type: str, command: str | None = None, stdin: bytes | None = None
    ) -> Result | None:
        from pycni.skel.delegate import delegate

        return delegate(req, plugin_type, command, stdin)

    def locked(self, netns: NetNS) -> AbstractContextManager[None]:
        return _flocked(netns.fd)

    def selinux(self) -> SELinux:
        from pycni.skel.selinux import LINUX

        return LINUX

    def state(self) -> StateFiles:
        from pycni.state.disk import DISK

        return DISK

    def processes(self) -> Processes:
        from pycni.process.real import REAL

        return REAL

    def live_addresses(self) -> LiveAddresses:
        from pycni.net.nsscan import live_addresses

        return live_addresses()


@contextmanager
def _inside(fd: int) -> Iterator[Kernel]:
    """This thread in the namespace of ``fd`` and a Kernel of it, for one ``with`` block."""
    from pycni.net.netlink.client import rtnl

    with entered_fd(fd), rtnl() as kernel:
        yield kernel


@contextmanager
def _flocked(fd: int) -> Iterator[None]:
    """flock on the namespace file, as the reference's sbr and vrf."""
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


REAL_HOST = RealHost()

if TYPE_CHECKING:
    _check: type[Host] = RealHost  # mypy proves RealHost satisfies the Protocol
