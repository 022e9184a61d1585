"""FakeNftables: one namespace's nftables in memory, for the rootless plugin-logic tests.

Held to the real transport (pycni.net.netfilter.nft_seam.ThreadNftables) by contract cases.
Nothing in pycni imports this module but the fake host (pycni.skel.fake_host).
"""

from __future__ import annotations


class FakeNftables:
    """One namespace's nftables ruleset, in memory."""
