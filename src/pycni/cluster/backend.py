"""What the agent needs from a data-path backend (host-gw, vxlan)."""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

from pycni.cluster.lease import LeaseInfo
from pycni.cluster.subnet import Net
from pycni.record import record


@record(frozen=True)
class Underlay:
    """The node's link to the other nodes."""

    ifname: str
    index: int
    address: ipaddress.IPv4Address | ipaddress.IPv6Address  # of the family it carries
    mtu: int

    @property
    def version(self) -> int:
        return self.address.version


class Backend(Protocol):
    type_name: str

    def backend_data(self) -> dict[str, Any]:
        """What other nodes need to reach us (published with the lease)."""
        ...

    def pod_mtu(self) -> int:
        """The MTU pods must use (written as FLANNEL_MTU)."""
        ...

    def set_pod_mtu(self, mtu: int) -> None:
        """Use ``mtu`` instead of the computed one (checked by the caller)."""
        ...

    def configure(self, own: Net) -> None:
        """Set up the local side once our subnet is known (and again after a change)."""
        ...

    def sync(self, own: Net, remotes: dict[Net, LeaseInfo]) -> list[str]:
        """Make the data path reach exactly ``remotes``; returns what changed."""
        ...

    def update(
        self, own: Net, before: dict[Net, LeaseInfo], after: dict[Net, LeaseInfo]
    ) -> list[str]:
        """Move the data path from ``before`` (what the last sync or update left) to
        ``after`` touching only what differs, without reading the kernel's tables (a watch
        event's cheap path; ``sync`` repairs any drift)."""
        ...
