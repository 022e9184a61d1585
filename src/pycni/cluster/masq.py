"""Masquerade pod traffic that leaves the cluster network (and only that).

One nft table per node, replaced atomically: traffic between pods (cluster network to
cluster network) keeps its source address, so the receiver sees the sender's pod IP;
traffic from pods to anywhere else (except multicast) is masqueraded to the node address.
"""

from __future__ import annotations

from pycni.cluster.subnet import Net
from pycni.net import nft

TABLE = "pycni-cluster"


def script(network: Net) -> str:
    return (
        f"table ip {TABLE} {{}}\n"
        f"delete table ip {TABLE}\n"
        f"table ip {TABLE} {{\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        f"    ip saddr {network} ip daddr {network} return\n"
        f"    ip saddr {network} ip daddr != 224.0.0.0/4 masquerade\n"
        "  }\n"
        "}\n"
    )


def ensure(network: Net) -> bool:
    """Install the rules when the table is missing; True when it had to be (re)made."""
    if nft.table_exists("ip", TABLE):
        return False
    nft.apply(script(network))
    return True


def remove() -> None:
    nft.apply(f"table ip {TABLE} {{}}\ndelete table ip {TABLE}\n")
