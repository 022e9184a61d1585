"""Permanent neighbor entries (ARP, NDP) on one link: list, set, delete."""

from __future__ import annotations

from pycni.net.netlink.kernel import AF_INET, NUD_PERMANENT, IPAddress, Kernel, NetlinkError

Address = IPAddress


def permanent(kernel: Kernel, index: int, family: int = AF_INET) -> dict[Address, str]:
    """The link's permanent neighbors of ``family``: address → MAC."""
    return {
        n.address: n.mac
        for n in kernel.neighbours(index, family)
        if n.index == index and n.state & NUD_PERMANENT
    }


def set_permanent(kernel: Kernel, index: int, address: Address, mac: str) -> None:
    kernel.set_neighbour(index, address, mac)


def delete(kernel: Kernel, index: int, address: Address) -> None:
    try:
        kernel.delete_neighbour(index, address)
    except NetlinkError as exc:
        if not exc.no_such_entry:
            raise
