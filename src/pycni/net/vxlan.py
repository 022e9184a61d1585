"""VXLAN devices: create one with given parameters, or keep the one that already matches.

The cluster agent owns one device per node (like flannel's ``flannel.1``). Learning is
off: the agent programs every remote VTEP itself (neighbor + FDB entries), so the kernel
never floods to find one.
"""

from __future__ import annotations

import ipaddress

from pycni.net import link
from pycni.net.netlink.kernel import IFF_UP, Kernel, Link
from pycni.record import record

DEFAULT_PORT = 8472  # the Linux default, also flannel's
OVERHEAD = 50  # outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14) headers
OVERHEAD_V6 = 70  # the same over an IPv6 underlay (40-byte outer header)


def overhead(underlay_version: int) -> int:
    """Bytes VXLAN adds to each packet over an underlay of that IP version."""
    return OVERHEAD_V6 if underlay_version == 6 else OVERHEAD


@record(frozen=True)
class VxlanSpec:
    name: str
    vni: int
    local: ipaddress.IPv4Address | ipaddress.IPv6Address
    underlay_index: int
    mtu: int
    port: int = DEFAULT_PORT


def _matches(found: Link, spec: VxlanSpec) -> bool:
    data = found.vxlan
    if found.kind != "vxlan" or data is None:
        return False
    return (
        data.vni == spec.vni
        and data.local is not None
        and data.local == spec.local
        and data.underlay_index == spec.underlay_index
        and data.port == spec.port
        and not data.learning
    )


def ensure(kernel: Kernel, spec: VxlanSpec) -> tuple[int, str]:
    """The device as ``spec`` says, up; returns (index, MAC). A device of that name with
    other parameters is replaced; a matching one is kept (its MAC, so peers stay valid)."""
    found = kernel.find_link(spec.name)
    if found is not None and not _matches(found, spec):
        kernel.delete_link(found.index)
        found = None
    if found is None:
        kernel.add_vxlan(spec.name, spec.vni, spec.local, spec.underlay_index, spec.port, spec.mtu)
        found = link.get(kernel, spec.name)
    index = found.index
    if found.mtu != spec.mtu:
        kernel.set_link(index, mtu=spec.mtu)
    if not found.flags & IFF_UP:
        kernel.set_link(index, up=True)
    return index, found.mac


IFA_F_NODAD = 0x02


def ensure_address(
    kernel: Kernel, index: int, address: ipaddress.IPv4Interface | ipaddress.IPv6Interface
) -> None:
    """Exactly ``address`` of its family on the device (an old subnet's address is removed;
    IPv6 link-local addresses stay). An IPv6 address skips DAD: it is unique by lease."""
    present = link.addresses(kernel, index)
    for old in present:
        if old != address and old.version == address.version and not old.ip.is_link_local:
            kernel.delete_address(index, old)
    if address not in present:
        kernel.add_address(index, address, IFA_F_NODAD if address.version == 6 else 0)
