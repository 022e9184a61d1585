"""nftables as a plugin is handed it (pycni.net.netfilter.seam): libnftables JSON commands and
nf_tables netlink reads and batches of one namespace, as a Protocol and the real transport."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # typing is not imported at run time


class Nftables(Protocol):
    """One namespace's nftables (the methods are added as the plugins move onto the seam)."""


class ThreadNftables:
    """The calling thread's namespace, through pycni.net.netfilter.nft and .nftnl."""

    __slots__ = ()


THREAD_NFTABLES = ThreadNftables()
