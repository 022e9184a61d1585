"""What the portmap plugin needs from a backend (nftables, iptables): one set of verbs, picked
once per call from the config."""

from __future__ import annotations

from collections.abc import Callable

from pycni.plugins.meta.portmap.config import PortMapConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from pycni.net.netfilter.seam import Netfilter
else:
    Protocol = object  # typing is not imported at run time


class Backend(Protocol):
    """A portmap backend; every verb works on the node's netfilter ``nf``
    (``req.host.netfilter(kernel)``)."""

    name: str

    def add(
        self, nf: Netfilter, cfg: PortMapConfig, step: Callable[[str], None]
    ) -> Callable[[], object]:
        """Install the attachment's mappings (whole or not at all); returns what removes
        them again when a later step of the ADD fails."""
        ...

    def delete(self, nf: Netfilter, cfg: PortMapConfig) -> bool:
        """Remove the attachment's mappings (by network, container ID and ifname); False
        when there were none."""
        ...

    def check(self, nf: Netfilter, cfg: PortMapConfig) -> None:
        """Raise a CNIError when the attachment's mappings are not in place."""
        ...

    def gc(self, nf: Netfilter, cfg: PortMapConfig, valid: list[tuple[str, str]]) -> list[str]:
        """Remove the network's attachments not in ``valid`` ((container ID, ifname) pairs);
        returns what was removed."""
        ...

    def usable(self, nf: Netfilter, cfg: PortMapConfig) -> bool:
        """Whether the backend can be used on this node (STATUS)."""
        ...
