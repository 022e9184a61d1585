"""veth pairs created in one netlink call with the peer placed directly in another namespace.

We create the pair from the node side (host end named ``veth%08x``, peer = the pod's
interface moved at creation with ``net_ns_fd``); measured here it costs the same as the
reference's direction (pod side first) and it lets us tell a host-name collision (retry with
a new random name) from a pod-name collision (the pod already has that interface) by looking
up the host name locally.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any

from pycni.net import sysctl
from pycni.net.link import index_of

HOST_NAME_RETRIES = 10


class VethNameTaken(Exception):
    """The pod already has an interface with the requested name."""


@dataclass
class VethPair:
    host_name: str
    host_index: int


def random_host_name() -> str:
    return "veth" + os.urandom(4).hex()


def create_pair(
    ipr: Any, pod_ns_fd: int, pod_ifname: str, mtu: int = 0, pod_mac: str = ""
) -> VethPair:
    """Create ``veth%08x`` here with its peer ``pod_ifname`` in the pod namespace.

    The host end is set up with accept_ra=0 (as pkg/ip's SetupVeth); the pod end is left
    down. ``ipr`` must be a socket of the node namespace and this thread must be in it.
    """
    for _ in range(HOST_NAME_RETRIES):
        host_name = random_host_name()
        peer: dict[str, Any] = {"ifname": pod_ifname, "net_ns_fd": pod_ns_fd}
        if mtu:
            peer["mtu"] = mtu
        if pod_mac:
            peer["address"] = pod_mac
        spec: dict[str, Any] = {"ifname": host_name, "kind": "veth", "peer": peer}
        if mtu:
            spec["mtu"] = mtu
        try:
            ipr.link("add", **spec)
        except Exception as exc:
            if getattr(exc, "code", None) != errno.EEXIST:
                raise
            if ipr.link_lookup(ifname=host_name):
                continue  # our random name was taken: try another
            raise VethNameTaken(
                f"container veth name provided ({pod_ifname}) already exists"
            ) from None
        index = index_of(ipr, host_name)
        sysctl.try_write(f"net/ipv6/conf/{host_name}/accept_ra", "0")
        ipr.link("set", index=index, state="up")
        return VethPair(host_name, index)
    raise RuntimeError(f"failed to find a unique veth name after {HOST_NAME_RETRIES} tries")
