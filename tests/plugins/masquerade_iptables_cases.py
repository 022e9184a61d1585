"""ipMasq on the iptables backend, the cases bridge and ptp share (their masquerade step is
pycni.plugins.main.shared.masquerade): through skel on a FakeHost, no root.

Each plugin's tests/plugins/<plugin>/test_logic_iptables.py imports these cases and names its
plugin type in a ``plugin`` fixture. The node's nat table is its FakeIptables (held to the real
tools by tests/netfilter/iptables_contract.py): ADD writes the reference's ``CNI-<hash>`` chain
and POSTROUTING jump (one ``iptables`` per rule, as the reference), CHECK passes, DEL and GC
remove them (also looking in the host's FakeNftables, where the default backend may hold the
attachment), and a failure at each step of ADD leaves node, pod and tables as they were.
"""

from __future__ import annotations

from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.iptables_logic import assert_each_step_rolls_back, iptables_of, masquerade_rules
from tests.plugin_logic import CONTAINER_ID, POD, ok, with_prev

STATIC = {"type": "static", "addresses": [{"address": "10.22.0.5/24", "gateway": "10.22.0.1"}]}
OWN_KEYS: dict[str, dict[str, Any]] = {
    "bridge": {"bridge": "cni0", "isGateway": True},
    "ptp": {},
}


def network(plugin: str) -> str:
    return f"{plugin}-net"


def conf(plugin: str, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": network(plugin),
        "type": plugin,
        **OWN_KEYS[plugin],
        "ipMasq": True,
        "ipMasqBackend": "iptables",
        "ipam": STATIC,
        **extra,
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def test_add_masquerades_with_the_references_chain_and_check_passes(plugin: str) -> None:
    host = new_host()
    result = ok(host, plugin, "ADD", conf(plugin))
    ipt = iptables_of(host)
    assert ipt.picture() == {
        "nft ipv4 nat": masquerade_rules(network(plugin), CONTAINER_ID, "10.22.0.5/24")
    }
    assert ipt.nft_chain_exists("nat", "POSTROUTING")
    assert iptables_of(host, POD).picture() == {}
    ok(host, plugin, "CHECK", with_prev(conf(plugin), result))


def test_without_ipmasq_no_table_is_touched(plugin: str) -> None:
    host = new_host()
    ok(host, plugin, "ADD", conf(plugin, ipMasq=False))
    assert iptables_of(host).restores == [] and iptables_of(host).tables == {}


def test_del_removes_the_chain_and_the_jump(plugin: str) -> None:
    host = new_host()
    ok(host, plugin, "ADD", conf(plugin))
    ok(host, plugin, "DEL", conf(plugin))
    assert iptables_of(host).picture() == {}
    ok(host, plugin, "DEL", conf(plugin))  # again: nothing left


def test_gc_removes_the_chains_of_attachments_no_longer_valid(plugin: str) -> None:
    host = new_host()
    ok(host, plugin, "ADD", conf(plugin))
    gc = {**conf(plugin), "cni.dev/valid-attachments": []}
    ok(host, plugin, "GC", gc)
    assert iptables_of(host).picture() == {}


def test_a_failure_at_each_step_leaves_node_pod_and_tables_as_they_were(plugin: str) -> None:
    steps = assert_each_step_rolls_back(new_host(), plugin, conf(plugin))
    assert "ipmasq" in steps
