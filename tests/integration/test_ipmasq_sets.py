"""The nftables masquerade through per-network sets: exact DEL and GC by attachment, and pods
set up with the per-address rules of the older layout (and the reference's) still go away."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pycni.net import ipmasq, nft
from tests.harness import Namespace

pytestmark = pytest.mark.kernel
NET = "setnet"


def ipns(*texts: str) -> list[Any]:
    return [ipaddress.ip_interface(t) for t in texts]


def table(node: Namespace) -> list[dict[str, Any]]:
    out = node.run("nft", "-j", "list", "table", "inet", ipmasq.TABLE, check=False).stdout
    return json.loads(out)["nftables"] if out.strip() else []


def elements(node: Namespace) -> dict[str, str]:
    """address -> comment of every element of our sets."""
    found: dict[str, str] = {}
    for item in table(node):
        for elem in item.get("set", {}).get("elem", []):
            found[str(elem["elem"]["val"])] = str(elem["elem"].get("comment", ""))
    return found


def rules(node: Namespace, chain: str) -> list[str]:
    return [
        str(item["rule"].get("comment", ""))
        for item in table(node)
        if "rule" in item and item["rule"]["chain"] == chain
    ]


def test_one_rule_per_subnet_and_exact_delete(node: Namespace) -> None:
    a = ipns("10.61.0.2/16", "fd00:61::2/64")
    b = ipns("10.61.0.3/16", "fd00:61::3/64")
    with node.entered():
        ipmasq.setup_nftables(a, NET, "eth0", "pod-a")
        ipmasq.setup_nftables(b, NET, "eth0", "pod-b")
        ipmasq.setup_nftables(b, NET, "eth0", "pod-b")  # a repeated ADD adds nothing
    found = elements(node)
    assert found == {
        "10.61.0.2": ipmasq.comment_for_instance(NET, "eth0", "pod-a"),
        "fd00:61::2": ipmasq.comment_for_instance(NET, "eth0", "pod-a"),
        "10.61.0.3": ipmasq.comment_for_instance(NET, "eth0", "pod-b"),
        "fd00:61::3": ipmasq.comment_for_instance(NET, "eth0", "pod-b"),
    }
    assert rules(node, ipmasq.CHAIN) == [f"pycni net: {NET}"]
    chain_rules = rules(node, ipmasq.net_chain(NET))
    assert chain_rules == [f"pycni 10.61.0.0/16 net: {NET}", f"pycni fd00:61::/64 net: {NET}"]
    # none of our rules starts with the network hash: the reference's GC leaves them alone
    assert not any(c.startswith(ipmasq.hash_for_network(NET)) for c in chain_rules)
    with node.entered():
        # DEL of another attachment naming pod-a's addresses removes nothing
        ipmasq.teardown_nftables(NET, "eth0", "pod-x", a)
        assert set(elements(node)) == {"10.61.0.2", "fd00:61::2", "10.61.0.3", "fd00:61::3"}
        ipmasq.teardown_nftables(NET, "eth0", "pod-a", a)
        assert set(elements(node)) == {"10.61.0.3", "fd00:61::3"}
        # without the addresses (the pod's namespace is gone) the comment finds them
        ipmasq.teardown_nftables(NET, "eth0", "pod-b")
    assert elements(node) == {}


def test_an_address_reused_by_a_new_attachment_carries_its_comment(node: Namespace) -> None:
    with node.entered():
        ipmasq.setup_nftables(ipns("10.62.0.5/24"), NET, "eth0", "old")  # leaked, never DELed
        ipmasq.setup_nftables(ipns("10.62.0.5/24"), NET, "eth0", "new")
        assert elements(node) == {"10.62.0.5": ipmasq.comment_for_instance(NET, "eth0", "new")}
        ipmasq.teardown_nftables(NET, "eth0", "old", ipns("10.62.0.5/24"))
        assert "10.62.0.5" in elements(node)
        assert ipmasq.gc_nftables(NET, [("new", "eth0")]) == 0
        assert ipmasq.gc_nftables(NET, []) == 1
    assert elements(node) == {}


def test_pods_of_the_per_address_layout_are_deleted_and_collected(node: Namespace) -> None:
    """A node upgraded with live pods: their rules in masq_checks (the reference's layout)
    must still go on DEL and GC, next to the new sets."""
    with node.entered():
        for cid, ip in (("legacy-1", "10.63.0.2/24"), ("legacy-2", "10.63.0.3/24")):
            nft.apply(ipmasq.nft_setup_script(ipns(ip), NET, "eth0", cid, []))
        ipmasq.setup_nftables(ipns("10.63.0.4/24"), NET, "eth0", "fresh")
        legacy = [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")]
        assert len(legacy) == 2
        ipmasq.teardown_nftables(NET, "eth0", "legacy-1", ipns("10.63.0.2/24"))
        left = [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")]
        assert left == [ipmasq.comment_for_instance(NET, "eth0", "legacy-2")]
        assert ipmasq.gc_nftables(NET, [("fresh", "eth0")]) == 1  # legacy-2's rule
        assert [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")] == []
        assert list(elements(node)) == ["10.63.0.4"]
        # an ADD after the upgrade of a pod that still has its old rule: DEL removes both
        nft.apply(ipmasq.nft_setup_script(ipns("10.63.0.9/24"), NET, "eth0", "both", []))
        ipmasq.setup_nftables(ipns("10.63.0.9/24"), NET, "eth0", "both")
        ipmasq.teardown_nftables(NET, "eth0", "both", ipns("10.63.0.9/24"))
        assert [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")] == []
        assert list(elements(node)) == ["10.63.0.4"]


def test_hostile_network_name_is_data(node: Namespace) -> None:
    name = 'evil"; flush ruleset; comment "'
    with node.entered():
        nft.apply("add table inet keepme\n")
        ipmasq.setup_nftables(ipns("10.64.0.2/24"), name, "eth0", "c")
        ipmasq.teardown_nftables(name, "eth0", "c", ipns("10.64.0.2/24"))
        assert nft.table_exists("inet", "keepme")
    assert elements(node) == {}
