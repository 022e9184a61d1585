"""bridge's ipMasq with the iptables backend through skel on a FakeHost: no root.

The node's nat table is its FakeIptables (held to the real tools by
tests/netfilter/iptables_contract.py): ADD writes the reference's ``CNI-<hash>`` chain and
POSTROUTING jump (one ``iptables`` per rule, as the reference), CHECK passes, and the node's
links, addresses and tables are compared whole. DEL, GC and a failed ADD's rollback also look
in nftables (the default backend may hold the attachment), so they wait for the nftables half
of the seam (tests/iptables_logic.needs_nft_half).
"""

from __future__ import annotations

from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.iptables_logic import (
    assert_each_step_rolls_back,
    iptables_of,
    masquerade_rules,
    needs_nft_half,
)
from tests.plugin_logic import CONTAINER_ID, POD, ok, with_prev

STATIC = {"type": "static", "addresses": [{"address": "10.22.0.5/24", "gateway": "10.22.0.1"}]}


def conf(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": "br-net",
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": True,
        "ipMasqBackend": "iptables",
        "ipam": STATIC,
        **extra,
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def test_add_masquerades_with_the_references_chain_and_check_passes() -> None:
    host = new_host()
    result = ok(host, "bridge", "ADD", conf())
    ipt = iptables_of(host)
    assert ipt.picture() == {
        "nft ipv4 nat": masquerade_rules("br-net", CONTAINER_ID, "10.22.0.5/24")
    }
    assert ipt.nft_chain_exists("nat", "POSTROUTING")
    assert iptables_of(host, POD).picture() == {}
    ok(host, "bridge", "CHECK", with_prev(conf(), result))


def test_without_ipmasq_no_table_is_touched() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", conf(ipMasq=False))
    assert iptables_of(host).restores == [] and iptables_of(host).tables == {}


@needs_nft_half
def test_del_removes_the_chain_and_the_jump() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", conf())
    ok(host, "bridge", "DEL", conf())
    assert iptables_of(host).picture() == {}
    ok(host, "bridge", "DEL", conf())  # again: nothing left


@needs_nft_half
def test_gc_removes_the_chains_of_attachments_no_longer_valid() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", conf())
    gc = {**conf(), "cni.dev/valid-attachments": []}
    ok(host, "bridge", "GC", gc)
    assert iptables_of(host).picture() == {}


@needs_nft_half
def test_a_failure_at_each_step_leaves_node_pod_and_tables_as_they_were() -> None:
    steps = assert_each_step_rolls_back(new_host(), "bridge", conf())
    assert "ipmasq" in steps
