"""Forwarding entries of a VXLAN device: which remote VTEP (underlay IP) owns a MAC."""

from __future__ import annotations

from pycni.net.netlink.kernel import IPAddress, Kernel, NetlinkError

Address = IPAddress


def remote_entries(kernel: Kernel, index: int) -> dict[str, Address]:
    """MAC → remote underlay address, for the device's unicast entries with a destination."""
    out: dict[str, Address] = {}
    for entry in kernel.fdb_entries(index):
        if entry.index != index or entry.remote is None or entry.mac == "00:00:00:00:00:00":
            continue
        out[entry.mac] = entry.remote
    return out


def set_remote(kernel: Kernel, index: int, mac: str, remote: Address) -> None:
    kernel.set_fdb(index, mac, remote)


def delete(kernel: Kernel, index: int, mac: str, remote: Address) -> None:
    try:
        kernel.delete_fdb(index, mac, remote)
    except NetlinkError as exc:
        if not exc.no_such_entry:
            raise
