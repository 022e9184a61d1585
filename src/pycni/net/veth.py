"""veth pairs created in one netlink call with the peer placed directly in another namespace.

We create the pair from the node side (host end named ``veth%08x``, peer = the pod's
interface moved at creation with ``net_ns_fd``); measured here it costs the same as the
reference's direction (pod side first) and it lets us tell a host-name collision (retry with
a new random name) from a pod-name collision (the pod already has that interface) by looking
up the host name locally.
"""

from __future__ import annotations

import os

from pycni.net.errors import NetError
from pycni.net.link import index_of
from pycni.net.netlink.kernel import Kernel, NetlinkError
from pycni.net.sysctl import Sysctl, try_write
from pycni.record import record

HOST_NAME_RETRIES = 10
# The host end's tx queue length: 0, as pkg/ip's SetupVeth leaves it (the pod end, created
# first there, gets the kernel's default; the peer an explicit 0). A veth has no qdisc of its
# own (noqueue), so the number only shows in ``ip link``; it is the same there as upstream's.
HOST_TXQLEN = 0


class VethNameTaken(NetError):
    """The pod already has an interface with the requested name."""


@record
class VethPair:
    host_name: str
    host_index: int


def random_host_name() -> str:
    return "veth" + os.urandom(4).hex()


def create_pair(
    kernel: Kernel,
    sysctl: Sysctl,
    pod_ns_fd: int,
    pod_ifname: str,
    mtu: int = 0,
    pod_mac: str = "",
    master: int = 0,
    host_ipv6: bool = True,
) -> VethPair:
    """Create ``veth%08x`` here with its peer ``pod_ifname`` in the pod namespace, then up.

    With ``master`` the host end is enslaved in the creating request, before it is up. With
    ``host_ipv6`` its IPv6 is on with accept_ra=0 (as pkg/ip's SetupVeth); without it IPv6
    is disabled on the host end before it comes up, so the kernel never gives it a link-local
    address, DAD, MLD reports or routes in the node's IPv6 table (docs/plugins/bridge.md:
    for a link that only forwards, as a bridge port). The pod end is left down. ``kernel``
    and ``sysctl`` are of the node namespace. The host end's queue length is 0, the pod end's
    the kernel's default (1000), as the reference's.
    """
    for _ in range(HOST_NAME_RETRIES):
        host_name = random_host_name()
        try:
            index = kernel.add_veth(
                host_name, pod_ifname, pod_ns_fd, mtu, pod_mac, master, HOST_TXQLEN
            )
        except NetlinkError as exc:
            if not exc.exists:
                raise
            if kernel.find_link(host_name) is not None:
                continue  # our random name was taken: try another
            raise VethNameTaken(
                f"container veth name provided ({pod_ifname}) already exists"
            ) from None
        if not index:
            index = index_of(kernel, host_name)
        if host_ipv6:
            try_write(sysctl, f"net/ipv6/conf/{host_name}/accept_ra", "0")
        else:
            # before up, so IPv6 never starts on this link; if the kernel refuses, the
            # reference's state (no IPv6 in the kernel at all: both fail, nothing to do)
            try:
                sysctl.write(f"net/ipv6/conf/{host_name}/disable_ipv6", "1")
            except OSError:
                try_write(sysctl, f"net/ipv6/conf/{host_name}/accept_ra", "0")
        kernel.set_link(index, up=True)
        return VethPair(host_name, index)
    raise RuntimeError(f"failed to find a unique veth name after {HOST_NAME_RETRIES} tries")
