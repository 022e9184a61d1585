"""Masquerade pod traffic that leaves the cluster network (and only that).

One nft table per node and address family (``ip pycni-cluster``, ``ip6 pycni-cluster``),
replaced atomically: traffic between pods (cluster network to cluster network) keeps its
source address, so the receiver sees the sender's pod IP; traffic from pods to anywhere
else (except multicast) is masqueraded to the node's address.
"""

from __future__ import annotations

from pycni.cluster.subnet import Net
from pycni.net.netfilter import nft

TABLE = "pycni-cluster"


def _family(network: Net) -> tuple[str, str, str]:
    """nft family, address keyword and multicast range of ``network``'s IP version."""
    if network.version == 6:
        return "ip6", "ip6", "ff00::/8"
    return "ip", "ip", "224.0.0.0/4"


def script(network: Net) -> str:
    family, kw, multicast = _family(network)
    return (
        f"table {family} {TABLE} {{}}\n"
        f"delete table {family} {TABLE}\n"
        f"table {family} {TABLE} {{\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        f"    {kw} saddr {network} {kw} daddr {network} return\n"
        f"    {kw} saddr {network} {kw} daddr != {multicast} masquerade\n"
        "  }\n"
        "}\n"
    )


def ensure(network: Net) -> bool:
    """Install the rules when the table is missing; True when it had to be (re)made."""
    if nft.table_exists(_family(network)[0], TABLE):
        return False
    nft.apply(script(network))
    return True
