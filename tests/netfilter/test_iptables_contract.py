"""The iptables and conntrack fakes' contract, fake side: FakeIptables and FakeConntrack answer
every case of tests/netfilter/iptables_contract.py as the real tools did (EXPECTED), without
root. tests/netfilter/test_iptables_contract_kernel.py holds the real transports to the same."""

from __future__ import annotations

import pytest

from tests.netfilter.iptables_contract import ALL, expected, on_fake, params


@pytest.mark.parametrize(("name", "variant"), params())
def test_fakes_answer_as_the_real_tools(name: str, variant: str) -> None:
    assert on_fake(ALL[name], variant) == expected(name, variant)
