"""Addresses of a pod interface: configure from a result (pkg/ipam's ConfigureIface) and check."""

from __future__ import annotations

import time

from pycni.net.errors import NetError
from pycni.net.link import addresses
from pycni.net.netlink.kernel import AF_INET6, Kernel, NetlinkError
from pycni.net.route import add_routes, prefix_route_exists
from pycni.net.sysctl import Sysctl, try_write
from pycni.spec.result import IPAddress, Result

IFA_F_TENTATIVE = 0x40
IFA_F_DADFAILED = 0x08
DAD_TIMEOUT = 5.0
DAD_POLL = 0.05


class AddressError(NetError):
    pass


def configure_iface(
    kernel: Kernel, sysctl: Sysctl, ifname: str, index: int, result: Result
) -> None:
    """Add the result's addresses that belong to ``ifname``, set it up, wait for DAD when a
    v6 gateway exists, then add the result's routes (a route without gw takes the first
    gateway of its family). ``kernel`` and ``sysctl`` are of the interface's namespace."""
    v4gw: IPAddress | None = None
    v6gw: IPAddress | None = None
    ipv6_enabled = False
    for ipc in result.ips:
        if ipc.interface is None:
            continue
        if not (0 <= ipc.interface < len(result.interfaces)) or (
            result.interfaces[ipc.interface].name != ifname
        ):
            raise AddressError(
                f'failed to add IP addr {ipc.address} to "{ifname}": invalid interface index'
            )
        if not ipv6_enabled and ipc.address.version == 6:
            for name in ("lo", ifname):
                key = f"net/ipv6/conf/{name}/disable_ipv6"
                try:
                    if sysctl.read(key) != "0":
                        sysctl.write(key, "0")
                except OSError:
                    pass
            try_write(sysctl, f"net/ipv6/conf/{ifname}/keep_addr_on_down", "1")
            ipv6_enabled = True
        try:
            kernel.add_address(index, ipc.address)
        except NetlinkError as exc:
            raise AddressError(
                f'failed to add IP addr {ipc.address} to "{ifname}": {exc}'
            ) from None
        if ipc.gateway is not None:
            if ipc.gateway.version == 4 and v4gw is None:
                v4gw = ipc.gateway
            elif ipc.gateway.version == 6 and v6gw is None:
                v6gw = ipc.gateway
    kernel.set_link(index, up=True)
    if v6gw is not None:
        wait_dad(kernel, ifname, index)
    add_routes(kernel, ifname, index, result.routes, v4gw, v6gw)


def wait_dad(kernel: Kernel, ifname: str, index: int, timeout: float = DAD_TIMEOUT) -> None:
    """Wait until no IPv6 address of the link is tentative; a failed DAD is an error."""
    deadline = time.monotonic() + timeout
    while True:
        tentative = False
        for found in kernel.addresses(index=index, family=AF_INET6):
            flags = found.flags
            if flags & IFA_F_DADFAILED:
                raise AddressError(f"link {ifname} has address with DAD failure")
            if flags & IFA_F_TENTATIVE:
                tentative = True
        if not tentative:
            return
        if time.monotonic() >= deadline:
            if kernel.link(index).oper_state == "up":
                raise AddressError(f"link {ifname} still has tentative addresses after {timeout}s")
            return
        time.sleep(DAD_POLL)


def validate_ips(kernel: Kernel, ifname: str, index: int, result: Result, iface_idx: int) -> None:
    """CHECK: each result IP of this interface is on it and has its prefix route."""
    present = addresses(kernel, index)
    for ipc in result.ips:
        if ipc.interface is not None and ipc.interface != iface_idx:
            continue
        if ipc.address not in present:
            raise AddressError(f"Failed to match addr {ipc.address} on interface {ifname}")
        if not prefix_route_exists(kernel, index, ipc.address):
            raise AddressError(f"Failed to match route {ipc.address.network} on interface {ifname}")
