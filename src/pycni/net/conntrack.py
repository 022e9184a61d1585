"""Conntrack entries through netlink (pyroute2's nfnetlink conntrack socket), no subprocess.

A UDP "connection" to a host port that was recorded before the DNAT rules existed keeps being
used for as long as traffic flows, so new rules never apply to it (plugins#123). Deleting the
entries whose *original* destination port is the host port makes the next packet go through
the new rules. The socket binds to the namespace of the calling thread.
"""

from __future__ import annotations

import socket

from pyroute2 import Conntrack
from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

PROTOCOLS = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP, "sctp": 132}


def delete_by_dst_port(ports: list[int], protocol: str, family: int) -> int:
    """Delete entries with original destination port in ``ports``; returns how many went."""
    if not ports:
        return 0
    af = socket.AF_INET if family == 4 else socket.AF_INET6
    proto = PROTOCOLS[protocol]
    wanted = set(ports)
    deleted = 0
    ct = Conntrack()
    try:
        matches = [
            entry
            for entry in ct.dump_entries(tuple_orig=NFCTAttrTuple(family=af, proto=proto))
            if entry.tuple_orig.dport in wanted
        ]
        for entry in matches:
            try:
                ct.delete(entry)
                deleted += 1
            except Exception:  # the entry may have expired meanwhile
                continue
    finally:
        ct.close()
    return deleted
