"""FakeNftables answers every contract case (tests/netfilter/nft_contract.py) as the real
nftables did when the case was written; no root, no namespace."""

from __future__ import annotations

import pytest

from pycni.net.netfilter.fake_nft import FakeNftables
from tests.netfilter.nft_contract import CASES, EXPECTED


@pytest.mark.parametrize("name", sorted(CASES))
def test_fake_answers_as_the_kernel_did(name: str) -> None:
    assert CASES[name](FakeNftables()) == EXPECTED[name]


def test_every_case_has_a_recorded_answer() -> None:
    assert set(EXPECTED) == set(CASES)
