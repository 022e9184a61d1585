"""ipvlan and 802.1Q links of a node interface, created straight into a pod's namespace.

As macvlan (net/macvlan.py): the link is created under a temporary name directly in the
target namespace and renamed there, because the kernel checks the name in the namespace of
creation, where a node link may already carry the pod's interface name.
"""

from __future__ import annotations

from pycni.net.netlink.kernel import Kernel, Link, NetlinkError
from pycni.net.veth import random_host_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# IFLA_IPVLAN_MODE and IFLA_IPVLAN_FLAGS values by the names configs and `ip link` use
IPVLAN_MODES: dict[str, int] = {"l2": 0, "l3": 1, "l3s": 2}
IPVLAN_FLAGS: dict[str, int] = {"bridge": 0, "private": 1, "vepa": 2}
_MODE_NAMES = {v: k for k, v in IPVLAN_MODES.items()}
_FLAG_NAMES = {v: k for k, v in IPVLAN_FLAGS.items()}


def ipvlan_mode(text: str) -> int:
    """The IFLA_IPVLAN_MODE of a config's ``mode`` ("" is l2, as the reference)."""
    value = IPVLAN_MODES.get(text or "l2")
    if value is None:
        raise ValueError(f"unknown ipvlan mode: {text!r}")
    return value


def ipvlan_flag(text: str) -> int:
    """The IFLA_IPVLAN_FLAGS of a config's ``flag`` ("" is bridge, the kernel's default)."""
    value = IPVLAN_FLAGS.get(text or "bridge")
    if value is None:
        raise ValueError(f"unknown ipvlan flag: {text!r}")
    return value


def ipvlan_mode_name(found: Link) -> str:
    """The mode of an existing ipvlan ("" when the link is not an ipvlan)."""
    if found.kind != "ipvlan":
        return ""
    mode = found.ipvlan_mode or 0
    return _MODE_NAMES.get(mode, str(mode))


def ipvlan_flag_name(found: Link) -> str:
    return _FLAG_NAMES.get(found.ipvlan_flags, str(found.ipvlan_flags))


def create_in_netns(make: Callable[[str], None]) -> str:
    """Call ``make(name)`` with fresh temporary names until one is free; return that name.

    ``make`` creates the link (``Kernel.add_ipvlan``/``add_vlan`` with the target namespace's
    fd); an EEXIST means the random name was taken there, anything else is raised."""
    for _ in range(10):
        tmp = random_host_name()
        try:
            make(tmp)
        except NetlinkError as exc:
            if exc.exists:
                continue
            raise
        return tmp
    raise RuntimeError("failed to find a free temporary link name")


def add_ipvlan(
    kernel: Kernel, master: int, netns_fd: int, mode: int, flag: int, mtu: int = 0
) -> str:
    """An ipvlan of ``master`` (in ``kernel``'s namespace) created in ``netns_fd``."""
    return create_in_netns(lambda tmp: kernel.add_ipvlan(tmp, master, mode, flag, netns_fd, mtu))


def add_vlan(kernel: Kernel, master: int, netns_fd: int, vlan_id: int, mtu: int = 0) -> str:
    """An 802.1Q link of ``master`` tagging ``vlan_id``, created in ``netns_fd``."""
    return create_in_netns(lambda tmp: kernel.add_vlan(tmp, master, vlan_id, netns_fd, mtu))
