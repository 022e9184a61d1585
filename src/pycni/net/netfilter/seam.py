"""The netfilter a plugin is handed: nftables, iptables and conntrack of one namespace.

Like ``Sysctl`` (pycni.net.sysctl), a ``Netfilter`` belongs to the namespace of the Kernel the
plugin's host handed out with it (``req.host.netfilter(kernel)``, pycni.skel.host): plugins
never import the transports (nft, nftnl, iptables, conntrack) themselves. The real one acts on
the calling thread's namespace, which the seam keeps equal to the Kernel's for the block that
handed it out; the fakes (fake_nft.py, fake_iptables.py) keep per-namespace state in memory
and are held to the real transports by contract cases, as FakeKernel is.
"""

from __future__ import annotations

from pycni.net.netfilter.iptables_seam import THREAD_CONNTRACK, THREAD_IPTABLES
from pycni.net.netfilter.nft_seam import THREAD_NFTABLES
from pycni.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.net.netfilter.iptables_seam import Conntrack, Iptables
    from pycni.net.netfilter.nft_seam import Nftables


@record
class Netfilter:
    """One namespace's netfilter: nftables (libnftables JSON and nf_tables netlink), iptables
    (save/restore) and the conntrack table."""

    nft: Nftables
    iptables: Iptables
    conntrack: Conntrack


THREAD = Netfilter(THREAD_NFTABLES, THREAD_IPTABLES, THREAD_CONNTRACK)
