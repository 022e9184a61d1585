"""Link attributes the tuning plugin reads and changes: MAC, MTU, promisc, allmulti, txqlen, alias.

All calls take an open rtnl socket of the namespace the link lives in (one socket per call).
"""

from __future__ import annotations

from pycni.net.netlink.kernel import IFF_ALLMULTI, IFF_PROMISC, Kernel
from pycni.record import record


@record
class LinkAttrs:
    """The current values, as the reference reads them (promisc from the promiscuity counter)."""

    index: int
    mac: str
    mtu: int
    promisc: bool
    allmulti: bool
    txqlen: int
    alias: str


def read(kernel: Kernel, index: int) -> LinkAttrs:
    found = kernel.link(index)
    return LinkAttrs(
        index=index,
        mac=found.mac,
        mtu=found.mtu,
        promisc=found.promiscuity != 0,
        allmulti=bool(found.flags & IFF_ALLMULTI),
        txqlen=found.txqlen,
        alias=found.alias,
    )


def set_mac(kernel: Kernel, index: int, mac: str) -> None:
    kernel.set_link(index, mac=mac)


def set_mtu(kernel: Kernel, index: int, mtu: int) -> None:
    kernel.set_link(index, mtu=mtu)


def set_txqlen(kernel: Kernel, index: int, txqlen: int) -> None:
    kernel.set_link(index, txqlen=txqlen)


def set_alias(kernel: Kernel, index: int, alias: str) -> None:
    """An empty alias removes it (the kernel's rule for IFLA_IFALIAS)."""
    kernel.set_link(index, alias=alias)


def _set_flag(kernel: Kernel, index: int, flag: int, on: bool) -> None:
    kernel.set_link(index, flags=flag if on else 0, flag_mask=flag)


def set_promisc(kernel: Kernel, index: int, on: bool) -> None:
    _set_flag(kernel, index, IFF_PROMISC, on)


def set_allmulti(kernel: Kernel, index: int, on: bool) -> None:
    _set_flag(kernel, index, IFF_ALLMULTI, on)
