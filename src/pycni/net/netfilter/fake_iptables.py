"""FakeIptables and FakeConntrack: one namespace's iptables tables and conntrack table in
memory, for the rootless plugin-logic tests.

Held to the real transports (pycni.net.netfilter.iptables_seam) by contract cases. Nothing in
pycni imports this module but the fake host (pycni.skel.fake_host).
"""

from __future__ import annotations


class FakeIptables:
    """One namespace's iptables tables, in memory."""


class FakeConntrack:
    """One namespace's conntrack entries, in memory."""
