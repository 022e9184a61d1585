"""iptables and conntrack as a plugin is handed them (pycni.net.netfilter.seam): save/restore of
one namespace's tables and deletes from its conntrack table, as Protocols and the real
transports."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # typing is not imported at run time


class Iptables(Protocol):
    """One namespace's iptables (the methods are added as the plugins move onto the seam)."""


class Conntrack(Protocol):
    """One namespace's conntrack table (methods added as the plugins move onto the seam)."""


class ThreadIptables:
    """The calling thread's namespace, through pycni.net.netfilter.iptables."""

    __slots__ = ()


class ThreadConntrack:
    """The calling thread's namespace, through pycni.net.netfilter.conntrack."""

    __slots__ = ()


THREAD_IPTABLES = ThreadIptables()
THREAD_CONNTRACK = ThreadConntrack()
