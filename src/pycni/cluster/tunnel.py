"""The agent's own tunnel devices (wireguard, ipip): make one of a kind, or keep the one
that is there; the device carries the node subnet's network address alone."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from pycni.net import link
from pycni.net.netlink.kernel import IFF_UP, Kernel, Link
from pycni.net.netlink.rtnl import codec, wire

_CREATE = wire.NLM_F_CREATE | wire.NLM_F_EXCL | wire.NLM_F_ACK


def ensure(
    kernel: Kernel,
    name: str,
    kind: str,
    mtu: int,
    info_data: bytes = b"",
    matches: Callable[[Link], bool] = lambda _found: True,
) -> Link:
    """The link ``name`` of ``kind``, up, with ``mtu``. One of another kind, or that
    ``matches`` rejects, is replaced (the name is the agent's)."""
    found = kernel.find_link(name)
    if found is not None and (found.kind != kind or not matches(found)):
        kernel.delete_link(found.index)
        found = None
    if found is None:
        data = [wire.nested(codec.IFLA_INFO_DATA, [info_data])] if info_data else []
        sock = wire.Socket()
        try:
            sock.request(
                codec.RTM_NEWLINK,
                _CREATE,
                codec.new_link(kind, name, mtu, info_data=b"".join(data)),
            )
        finally:
            sock.close()
        found = link.get(kernel, name)
    if found.mtu != mtu:
        kernel.set_link(found.index, mtu=mtu)
    if not found.flags & IFF_UP:
        kernel.set_link(found.index, up=True)
    return found


def own_address(
    subnet: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """The device's address: the node subnet's network address, alone (a source address
    on the cluster network for the node's own traffic to pods elsewhere)."""
    return ipaddress.ip_interface(f"{subnet.network_address}/{subnet.max_prefixlen}")
