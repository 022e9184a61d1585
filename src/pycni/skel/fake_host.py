"""FakeHost: the plugin seam (pycni.skel.host.Host) over an in-memory machine.

A unit test builds one, adds pod namespaces by path, and runs a plugin through skel with it
(``skel.run(plugin_type, env, stdin, host=fake)``): every Kernel the plugin is handed is a
FakeKernel of pycni.net.netlink.fake_kernel (held to the real kernel by
tests/kernel_contract.py), every sysctl the FakeSysctl of that namespace, and a delegated
IPAM plugin runs in-process with the same host (no CNI_PATH lookup, no exec). Its netfilter
is that namespace's in-memory one: nftables a FakeNftables (pycni.net.netfilter.fake_nft, held
to libnftables and nf_tables netlink by tests/netfilter/nft_contract.py), iptables and
conntrack the fakes of fake_iptables.py (held to the real tools by
tests/netfilter/iptables_contract.py); a test may put its own Netfilter in ``netfilters``.
tap's /dev/net/tun device is made by the maker the plugin is built with; a test passes one
over FakeKernel.add_tap (tests/plugins/tap/test_logic.py). ``selinux()`` is a FakeSELinux
(off unless a test turns it on), which records tap's labelled helper runs. ``state()`` is a
FakeStateFiles (pycni.state.fake_files: the plugin's files in memory, ``files``) and
``processes()`` a FakeProcesses (pycni.process.fake_processes: the programs a test installs,
``children``).

Nothing in pycni imports this module; like FakeKernel it lives in src/ to be type-checked
with what it stands in for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pycni.net.netlink.fake_kernel import FakeKernel, FakeMachine, FakeNetns
from pycni.net.ns import NetNS, NetNSNotFound
from pycni.process.fake_processes import FakeProcesses
from pycni.state.fake_files import FakeStateFiles

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.seam import Netfilter
    from pycni.net.netlink.kernel import Kernel
    from pycni.net.nsscan import LiveAddresses
    from pycni.net.sysctl import Sysctl
    from pycni.skel.base import Request
    from pycni.skel.host import Host
    from pycni.spec.result import Result

__all__ = ["FakeHost", "FakeSELinux"]


class FakeSELinux:
    """SELinux as a test sets it: ``enabled``; ``runs`` records (label, argv) of every
    labelled exec; ``on_run(label, argv)`` stands in for the helper (raise SELinuxError to
    fail it), ``refuse`` makes the label write fail as the kernel does (LabelRefused, EINVAL)."""

    def __init__(
        self,
        enabled: bool = False,
        on_run: Callable[[str, Sequence[str]], None] | None = None,
        refuse: bool = False,
    ) -> None:
        self.is_enabled = enabled
        self.on_run = on_run
        self.refuse = refuse
        self.runs: list[tuple[str, list[str]]] = []

    def enabled(self) -> bool:
        return self.is_enabled

    def run_labelled(self, label: str, argv: Sequence[str], timeout: float) -> None:
        from pycni.skel.selinux import EXEC_ATTR, LabelRefused

        if self.refuse:
            raise LabelRefused(f"failed set socket label: write {EXEC_ATTR}: invalid argument")
        self.runs.append((label, list(argv)))
        if self.on_run is not None:
            self.on_run(label, argv)


class FakeHost:
    """A node namespace (``node``), pod namespaces by path (``pods``) and the delegations the
    plugin made (``delegations``: (plugin type, command) in order)."""

    def __init__(self, machine: FakeMachine | None = None) -> None:
        self.machine = machine or FakeMachine()
        self.node_ns = self.machine.namespace()
        self.pods: dict[str, FakeNetns] = {}
        self.delegations: list[tuple[str, str]] = []
        self.open_kernels = 0  # handed out and not yet closed: a test checks it is back to 0
        self.held: set[int] = set()  # pods whose lock is held
        self.selinux_state = FakeSELinux()  # disabled, as on most test machines
        self.netfilters: dict[int, Netfilter] = {}  # by namespace fd, made on first use
        self.files = FakeStateFiles()  # the node's state files, in memory
        self.children = FakeProcesses()  # the programs a test installs, and their processes

    # ------------------------------------------------------------ set-up and views

    def add_pod(self, path: str) -> FakeNetns:
        """A new pod namespace (lo up) known by ``path``."""
        ns = self.machine.namespace()
        self.pods[path] = ns
        return ns

    def remove_pod(self, path: str) -> None:
        """The pod namespace goes, as when its runtime deletes it: its links go with it
        (a veth's peer in the node too)."""
        ns = self.pods.pop(path)
        kernel = FakeKernel(ns)
        for link in kernel.links():
            if link.name != "lo":
                kernel.delete_link(link.index)
        self.machine.namespaces.pop(ns.fd, None)

    def kernel(self, path: str = "") -> FakeKernel:
        """A FakeKernel of the pod ``path`` (the node without one), for a test's checks."""
        return FakeKernel(self.pods[path] if path else self.node_ns)

    # ------------------------------------------------------------ the Host protocol

    def open_netns(self, path: str, fd: int | None = None) -> NetNS:
        if fd is not None:
            self.machine.resolve(fd)
            return NetNS.from_fd(fd, path)
        ns = self.pods.get(path)
        if ns is None:
            raise NetNSNotFound(path)
        return NetNS.from_fd(ns.fd, path)  # not owned: closing it closes no real fd

    def node_netns(self) -> NetNS:
        return NetNS.from_fd(self.node_ns.fd, "/proc/self/ns/net")

    @contextmanager
    def node(self) -> Iterator[Kernel]:
        with self._client(self.node_ns) as kernel:
            yield kernel

    @contextmanager
    def pod(self, netns: NetNS) -> Iterator[Kernel]:
        with self._client(self.machine.resolve(netns.fd)) as kernel:
            yield kernel

    @contextmanager
    def _client(self, ns: FakeNetns) -> Iterator[Kernel]:
        kernel = FakeKernel(ns)
        self.open_kernels += 1
        try:
            yield kernel
        finally:
            kernel.close()
            self.open_kernels -= 1

    def sysctl(self, kernel: Kernel) -> Sysctl:
        if not isinstance(kernel, FakeKernel):
            raise TypeError("FakeHost hands out FakeKernels only")
        return kernel.ns.sysctl

    def netfilter(self, kernel: Kernel) -> Netfilter:
        """The in-memory netfilter of ``kernel``'s namespace (the same object for every call)."""
        if not isinstance(kernel, FakeKernel):
            raise TypeError("FakeHost hands out FakeKernels only")
        return self._netfilter_of(kernel.ns)

    def node_netfilter(self) -> Netfilter:
        return self._netfilter_of(self.node_ns)

    def _netfilter_of(self, ns: FakeNetns) -> Netfilter:
        found = self.netfilters.get(ns.fd)
        if found is None:
            from pycni.net.netfilter.fake_iptables import FakeConntrack, FakeIptables
            from pycni.net.netfilter.fake_nft import FakeNftables
            from pycni.net.netfilter.seam import Netfilter

            found = Netfilter(FakeNftables(), FakeIptables(), FakeConntrack())
            self.netfilters[ns.fd] = found
        return found

    @contextmanager
    def locked(self, netns: NetNS) -> Iterator[None]:
        self.machine.resolve(netns.fd)
        if netns.fd in self.held:
            raise AssertionError("the pod's lock is taken twice by one run")
        self.held.add(netns.fd)
        try:
            yield
        finally:
            self.held.discard(netns.fd)

    def selinux(self) -> FakeSELinux:
        return self.selinux_state

    def state(self) -> FakeStateFiles:
        return self.files

    def processes(self) -> FakeProcesses:
        return self.children

    def live_addresses(self) -> LiveAddresses:
        """The addresses on the links of the node and of every pod namespace still here."""
        from pycni.net.nsscan import LiveAddresses

        found: set[str] = set()
        for ns in (self.node_ns, *self.pods.values()):
            found |= {str(a.interface.ip) for a in FakeKernel(ns).addresses()}
        return LiveAddresses(found, namespaces=1 + len(self.pods))

    def delegate(
        self, req: Request, plugin_type: str, command: str | None = None, stdin: bytes | None = None
    ) -> Result | None:
        from pycni.skel.delegate import parse_result, run_in_process

        command = command or req.command
        self.delegations.append((plugin_type, command))
        env = dict(req.env)
        env["CNI_COMMAND"] = command
        stdout = run_in_process(req, plugin_type, env, req.stdin if stdin is None else stdin)
        return parse_result(req, plugin_type, stdout) if command == "ADD" else None


if TYPE_CHECKING:
    _check: type[Host] = FakeHost  # mypy proves it satisfies the Protocol
