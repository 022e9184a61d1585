"""The nftables masquerade through per-network sets: exact DEL and GC by attachment, and pods
set up with the per-address rules of the older layout (and the reference's) still go away."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pycni.net.netfilter import ipmasq, nft
from pycni.net.netfilter.ipmasq import nft_backend as masq_nft
from pycni.net.netfilter.nft_seam import THREAD_NFTABLES as NFT
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
        masq_nft.setup(NFT, a, NET, "eth0", "pod-a")
        masq_nft.setup(NFT, b, NET, "eth0", "pod-b")
        masq_nft.setup(NFT, b, NET, "eth0", "pod-b")  # a repeated ADD adds nothing
    found = elements(node)
    assert found == {
        "10.61.0.2": ipmasq.comment_for_instance(NET, "eth0", "pod-a"),
        "fd00:61::2": ipmasq.comment_for_instance(NET, "eth0", "pod-a"),
        "10.61.0.3": ipmasq.comment_for_instance(NET, "eth0", "pod-b"),
        "fd00:61::3": ipmasq.comment_for_instance(NET, "eth0", "pod-b"),
    }
    assert rules(node, ipmasq.CHAIN) == [f"pycni net: {NET}"]
    chain_rules = rules(node, masq_nft.net_chain(NET))
    assert chain_rules == [f"pycni 10.61.0.0/16 net: {NET}", f"pycni fd00:61::/64 net: {NET}"]
    # none of our rules starts with the network hash: the reference's GC leaves them alone
    assert not any(c.startswith(ipmasq.hash_for_network(NET)) for c in chain_rules)
    with node.entered():
        # DEL of another attachment naming pod-a's addresses removes nothing
        masq_nft.teardown(NFT, NET, "eth0", "pod-x", a)
        assert set(elements(node)) == {"10.61.0.2", "fd00:61::2", "10.61.0.3", "fd00:61::3"}
        masq_nft.teardown(NFT, NET, "eth0", "pod-a", a)
        assert set(elements(node)) == {"10.61.0.3", "fd00:61::3"}
        # without the addresses (the pod's namespace is gone) the comment finds them
        masq_nft.teardown(NFT, NET, "eth0", "pod-b")
    assert elements(node) == {}


def test_an_address_reused_by_a_new_attachment_carries_its_comment(node: Namespace) -> None:
    with node.entered():
        masq_nft.setup(NFT, ipns("10.62.0.5/24"), NET, "eth0", "old")  # leaked, never DELed
        masq_nft.setup(NFT, ipns("10.62.0.5/24"), NET, "eth0", "new")
        assert elements(node) == {"10.62.0.5": ipmasq.comment_for_instance(NET, "eth0", "new")}
        masq_nft.teardown(NFT, NET, "eth0", "old", ipns("10.62.0.5/24"))
        assert "10.62.0.5" in elements(node)
        assert masq_nft.gc(NFT, NET, [("new", "eth0")]) == 0
        assert masq_nft.gc(NFT, NET, []) == 1
    assert elements(node) == {}


def test_pods_of_the_per_address_layout_are_deleted_and_collected(node: Namespace) -> None:
    """A node upgraded with live pods: their rules in masq_checks (the reference's layout)
    must still go on DEL and GC, next to the new sets."""
    with node.entered():
        for cid, ip in (("legacy-1", "10.63.0.2/24"), ("legacy-2", "10.63.0.3/24")):
            nft.apply(masq_nft.nft_setup_script(ipns(ip), NET, "eth0", cid, []))
        masq_nft.setup(NFT, ipns("10.63.0.4/24"), NET, "eth0", "fresh")
        legacy = [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")]
        assert len(legacy) == 2
        masq_nft.teardown(NFT, NET, "eth0", "legacy-1", ipns("10.63.0.2/24"))
        left = [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")]
        assert left == [ipmasq.comment_for_instance(NET, "eth0", "legacy-2")]
        assert masq_nft.gc(NFT, NET, [("fresh", "eth0")]) == 1  # legacy-2's rule
        assert [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")] == []
        assert list(elements(node)) == ["10.63.0.4"]
        # an ADD after the upgrade of a pod that still has its old rule: DEL removes both
        nft.apply(masq_nft.nft_setup_script(ipns("10.63.0.9/24"), NET, "eth0", "both", []))
        masq_nft.setup(NFT, ipns("10.63.0.9/24"), NET, "eth0", "both")
        masq_nft.teardown(NFT, NET, "eth0", "both", ipns("10.63.0.9/24"))
        assert [c for c in rules(node, ipmasq.CHAIN) if not c.startswith("pycni")] == []
        assert list(elements(node)) == ["10.63.0.4"]
        # the last pods: one of the older layout only (no set of its own), then the last
        nft.apply(masq_nft.nft_setup_script(ipns("10.69.0.2/24"), "old", "eth0", "only-old", []))
        masq_nft.teardown(NFT, NET, "eth0", "fresh", ipns("10.63.0.4/24"))
        assert rules(node, ipmasq.CHAIN) == [ipmasq.comment_for_instance("old", "eth0", "only-old")]
        masq_nft.teardown(NFT, "old", "eth0", "only-old", ipns("10.69.0.2/24"))
    assert table(node) == []  # the upgraded node's last DEL leaves no table either


def test_hostile_network_name_is_data(node: Namespace) -> None:
    name = 'evil"; flush ruleset; comment "'
    with node.entered():
        nft.apply("add table inet keepme\n")
        masq_nft.setup(NFT, ipns("10.64.0.2/24"), name, "eth0", "c")
        masq_nft.teardown(NFT, name, "eth0", "c", ipns("10.64.0.2/24"))
        assert nft.table_exists("inet", "keepme")
    assert elements(node) == {}


def ruleset(node: Namespace) -> list[dict[str, Any]]:
    out = node.run("nft", "-j", "list", "ruleset").stdout
    return [i for i in json.loads(out)["nftables"] if "metainfo" not in i]


def test_the_last_del_leaves_no_table(node: Namespace) -> None:
    """As the reference, whose per-pod iptables chains go with their pod: the network's chain
    and sets go with its last pod, the table with the last network."""
    with node.entered():
        masq_nft.setup(NFT, ipns("10.65.0.2/24", "fd00:65::2/64"), "net-a", "eth0", "a1")
        masq_nft.setup(NFT, ipns("10.65.0.3/24"), "net-a", "eth0", "a2")
        masq_nft.setup(NFT, ipns("10.66.0.2/24"), "net-b", "eth0", "b1")
        masq_nft.teardown(NFT, "net-a", "eth0", "a1", ipns("10.65.0.2/24", "fd00:65::2/64"))
        # a2 still holds an address of the network's IPv4 set: nothing of net-a goes
        assert rules(node, masq_nft.net_chain("net-a")) == [
            "pycni 10.65.0.0/24 net: net-a",
            "pycni fd00:65::/64 net: net-a",
        ]
        masq_nft.teardown(NFT, "net-a", "eth0", "a2")  # without its addresses (pod gone)
        assert rules(node, ipmasq.CHAIN) == ["pycni net: net-b"]
        assert not any(n.startswith(masq_nft.net_chain("net-a")) for n in _names(node))
        assert masq_nft.gc(NFT, "net-b", []) == 1  # GC of the last pod: the same
    assert ruleset(node) == []


def _names(node: Namespace) -> list[str]:
    kinds = ("set", "chain")
    return [str(v["name"]) for item in table(node) for k, v in item.items() if k in kinds]


def test_what_is_not_ours_keeps_the_table(node: Namespace) -> None:
    """A rule of the per-address layout (an older pycni's or the reference's pod) in
    masq_checks, or anything else in the table, keeps what it needs; the network's own
    objects still go."""
    with node.entered():
        nft.apply(masq_nft.nft_setup_script(ipns("10.67.0.2/24"), "old", "eth0", "legacy", []))
        masq_nft.setup(NFT, ipns("10.67.0.3/24"), NET, "eth0", "fresh")
        masq_nft.teardown(NFT, NET, "eth0", "fresh", ipns("10.67.0.3/24"))
        assert _names(node) == [ipmasq.CHAIN, "postrouting"]
        assert len(rules(node, ipmasq.CHAIN)) == 1
        nft.apply(f"add set inet {ipmasq.TABLE} foreign {{ type ipv4_addr ; }}\n")
        masq_nft.teardown(NFT, "old", "eth0", "legacy", ipns("10.67.0.2/24"))
        # the foreign set keeps the table, so its chains stay too (one batch: all or nothing)
        assert sorted(_names(node)) == ["foreign", ipmasq.CHAIN, "postrouting"]
        assert rules(node, ipmasq.CHAIN) == []
        nft.apply(f"delete table inet {ipmasq.TABLE}\n")


def test_concurrent_add_and_del_never_lose_a_live_pod(
    node: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's threads (or an ADD in another process) racing the last DEL: a pod whose
    ADD returned always has its address in the set and the chain path to it, whatever the
    other pod's DEL removed meanwhile. Each thread churns its own pod of the same network."""
    import threading

    from pycni.net.netfilter import nftnl

    released: list[bool] = []
    real_release = masq_nft.release_unused

    def counting(nft: Any, network: str, sets: Any = ()) -> bool:
        gone = real_release(nft, network, sets)
        released.append(gone)
        return gone

    monkeypatch.setattr(masq_nft, "release_unused", counting)
    failures: list[str] = []
    rounds = 100

    def churn(cid: str, ip: str) -> None:
        addr = ipaddress.ip_interface(ip)
        comment = ipmasq.comment_for_instance(NET, "eth0", cid)
        try:
            with node.entered():
                for i in range(rounds):
                    masq_nft.setup(NFT, [addr], NET, "eth0", cid)
                    name = masq_nft.set_name(NET, addr.network)
                    if nftnl.element_comment("inet", ipmasq.TABLE, name, addr.ip) != comment:
                        failures.append(f"{cid} round {i}: element missing after ADD")
                    checks = nftnl.chain_rules("inet", ipmasq.TABLE, ipmasq.CHAIN)
                    if f"pycni net: {NET}" not in [r.comment for r in checks]:
                        failures.append(f"{cid} round {i}: jump missing after ADD")
                    if not nftnl.chain_rules("inet", ipmasq.TABLE, "postrouting"):
                        failures.append(f"{cid} round {i}: postrouting empty after ADD")
                    masq_nft.teardown(NFT, NET, "eth0", cid, [addr])
        except Exception as exc:  # reported below, with the failures
            failures.append(f"{cid}: {exc!r}")

    threads = [
        threading.Thread(target=churn, args=(f"racer-{n}", f"10.68.0.{n + 2}/24")) for n in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert any(released)  # the table did go (at least after the last DEL)
    assert ruleset(node) == []
