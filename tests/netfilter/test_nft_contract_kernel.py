"""The nftables contract, real side: libnftables and nf_tables netlink (nft_seam's
ThreadNftables) in a private namespace answer every case of tests/netfilter/nft_contract.py as
recorded there, and as FakeNftables does. When an nft or kernel upgrade changes an answer this
module fails first: fix EXPECTED, then the fake."""

from __future__ import annotations

import pytest

from pycni.net.netfilter.fake_nft import FakeNftables
from pycni.net.netfilter.nft_seam import THREAD_NFTABLES
from tests import harness
from tests.netfilter.nft_contract import CASES, EXPECTED


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(CASES))
def test_nftables_answer_as_recorded_and_as_the_fake(name: str, node: harness.Namespace) -> None:
    with node.entered():
        real = CASES[name](THREAD_NFTABLES)
    assert real == EXPECTED[name]
    assert CASES[name](FakeNftables()) == real
