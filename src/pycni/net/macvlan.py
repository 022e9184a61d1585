"""macvlan links: modes, the node's default-route interface, creation straight into a pod.

The link is created with a temporary name directly in the pod namespace (``net_ns_fd``) and
renamed there afterwards: creating it under its final name could clash with a node link of
that name (the kernel checks the name in the namespace of creation).
"""

from __future__ import annotations

from pycni.net.errors import NetError
from pycni.net.netlink.kernel import AF_INET, AF_INET6, MAIN_TABLE, Kernel, Link, NetlinkError
from pycni.net.veth import random_host_name

# IFLA_MACVLAN_MODE values, by the names the CNI config uses ("" means bridge).
MODES: dict[str, int] = {"private": 1, "vepa": 2, "bridge": 4, "passthru": 8}
_NAMES = {v: k for k, v in MODES.items()}


class NoDefaultRoute(NetError, LookupError):
    """No route with a zero destination exists in this namespace."""


def parse_mode(text: str) -> str:
    """The canonical mode name; raises ValueError for an unknown one."""
    name = text or "bridge"
    if name not in MODES:
        raise ValueError(f"unknown macvlan mode: {text!r}")
    return name


def mode_of(found: Link) -> str:
    """The mode of an existing macvlan link ("" when it is not a macvlan)."""
    if found.kind != "macvlan":
        return ""
    mode = found.macvlan_mode or 0
    return _NAMES.get(mode, str(mode))


def default_route_interface(kernel: Kernel) -> str:
    """The link of the first route without a destination (any family), as the reference."""
    for family in (AF_INET, AF_INET6):
        for route in kernel.routes(family, table=MAIN_TABLE):
            if route.dst.prefixlen != 0:
                continue
            if route.oif:
                return kernel.link(route.oif).name
            if route.multipath_oifs:
                return kernel.link(route.multipath_oifs[0]).name
    raise NoDefaultRoute("no default route interface found")


def create_in_netns(
    kernel: Kernel,
    master_index: int,
    target_ns_fd: int,
    mode: str,
    mtu: int = 0,
    mac: str = "",
    bc_queue_len: int = 0,
) -> str:
    """Create a macvlan of ``master_index`` under a temporary name in ``target_ns_fd``.

    ``kernel`` is a client of the master's namespace; ``bc_queue_len`` 0 leaves the kernel's
    broadcast queue length. Returns the temporary name.
    """
    for _ in range(10):
        tmp = random_host_name()
        try:
            kernel.add_macvlan(tmp, master_index, MODES[mode], target_ns_fd, mtu, mac, bc_queue_len)
        except NetlinkError as exc:
            if exc.exists:  # the random name was taken
                continue
            raise
        return tmp
    raise RuntimeError("failed to find a free temporary link name")
