"""Scale: with hundreds of mapped attachments the nftables rules stay the same and only map
and set elements grow, by a constant per pod (iptables: rules grow by a constant per pod);
the netlink batch of one ADD/DEL has the same size whatever the number of pods, and DEL of
one attachment leaves the others untouched. Fake attachments, added through the backends
directly in a node namespace (no pods needed)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pycni.net.netfilter import rule_matches
from pycni.net.netfilter.seam import THREAD
from pycni.plugins.meta.portmap import iptables_backend, nft_backend, nft_chains, nft_maps
from pycni.plugins.meta.portmap.config import PortMapConfig, PortMapping
from pycni.spec.errors import CNIError
from tests.harness import Namespace

pytestmark = pytest.mark.kernel


def fake(i: int, backend: str = "nftables") -> PortMapConfig:
    return PortMapConfig(
        network="scalenet",
        container_id=f"cid-{i:04d}",
        ifname="eth0",
        mappings=[
            PortMapping(10000 + i, 80, "tcp"),
            PortMapping(10000 + i, 53, "udp"),
        ],
        backend=backend,
        container_ips={
            4: ipaddress.ip_interface(f"10.{100 + i // 250}.{i % 250}.2/16"),
            6: ipaddress.ip_interface(f"fd00:55::{i + 2:x}/64"),
        },
    )


def nft_counts(node: Namespace) -> tuple[int, int]:
    """(rules, set and map elements) of pycni's portmap table."""
    data: Any = json.loads(node.run("nft", "-j", "list", "table", "inet", "pycni_portmap").stdout)
    items = data["nftables"]
    rules = sum(1 for item in items if "rule" in item)
    elements = sum(
        len(item[kind].get("elem", [])) for item in items for kind in ("map", "set") if kind in item
    )
    return rules, elements


NFT = nft_backend.BACKEND


def _add(cfg: PortMapConfig) -> None:
    NFT.add(THREAD, cfg, lambda step: None)


def test_nft_rules_constant_elements_grow_by_a_constant_per_pod(node: Namespace) -> None:
    counts: dict[int, tuple[int, int]] = {}
    with node.entered():
        for i in range(200):
            _add(fake(i))
            if i + 1 in (1, 2, 100, 200):
                counts[i + 1] = nft_counts(node)
    rules = counts[1][0]
    elems_per_pod = counts[2][1] - counts[1][1]
    # 2 mappings x (dnat4 + dnat6 + masq4 for the subnet and localhost + masq6 for the subnet)
    assert elems_per_pod == 10
    for n in (2, 100, 200):
        assert counts[n] == (rules, counts[1][1] + (n - 1) * elems_per_pod)
    # the netlink batch of pod 0 and pod 199 has the same size
    assert len(nft_maps.mappings(fake(0))) == len(nft_maps.mappings(fake(199)))
    with node.entered():
        assert NFT.delete(THREAD, fake(100))
        assert not NFT.delete(THREAD, fake(100))
        NFT.check(THREAD, fake(99))
        NFT.check(THREAD, fake(101))
        with pytest.raises(CNIError, match="has no element"):
            NFT.check(THREAD, fake(100))
        assert nft_counts(node) == (rules, counts[200][1] - elems_per_pod)
        blind = fake(101)  # DEL without runtimeConfig and prevResult: found by owner
        blind.mappings, blind.mappings_given, blind.container_ips = [], False, {}
        assert NFT.delete(THREAD, blind)
        removed = NFT.gc(THREAD, fake(0), [("cid-0007", "eth0")])
        assert len(removed) == 197
        NFT.check(THREAD, fake(7))
    assert nft_counts(node) == (rules, elems_per_pod)


def test_nft_conflicts_and_readd(node: Namespace) -> None:
    with node.entered():
        _add(fake(1))
        _add(fake(1))  # a repeated ADD of the same attachment is fine
        other = fake(2)
        other.mappings = fake(1).mappings
        with pytest.raises(CNIError, match="already mapped by another attachment"):
            _add(other)
        assert not NFT.delete(THREAD, other)  # the loser's DEL leaves the winner's elements
        NFT.check(THREAD, fake(1))
        moved = fake(1)
        moved.container_ips = fake(3).container_ips  # re-ADD with another address: replaced
        _add(moved)
        NFT.check(THREAD, moved)
        assert NFT.delete(THREAD, moved)
    assert nft_counts(node)[1] == 0


def test_nft_scaffold_repairs_itself(node: Namespace) -> None:
    """A marks chain that lost a rule, or a hostports chain flushed by hand, is written again
    by the next ADD; the pods' elements stay."""
    with node.entered():
        _add(fake(1))
        node.run(
            "nft", "delete", "rule", "inet", "pycni_portmap", "marks", "handle", _a_handle(node)
        )
        _add(fake(2))
        node.run("nft", "flush", "chain", "inet", "pycni_portmap", "hostports")
        _add(fake(3))
        NFT.check(THREAD, fake(1))
    data: Any = json.loads(
        node.run("nft", "-j", "list", "chain", "inet", "pycni_portmap", "marks").stdout
    )
    comments = [item["rule"].get("comment") for item in data["nftables"] if "rule" in item]
    assert sorted(comments) == sorted(["b13 4/16", "b13 4/32", "b13 6/64"] * 2)
    assert nft_counts(node)[0] == nft_backend.HOSTPORTS_RULES + 6 + 2 + 1  # + hooks + masq


def _a_handle(node: Namespace) -> str:
    data: Any = json.loads(
        node.run("nft", "-j", "-a", "list", "chain", "inet", "pycni_portmap", "marks").stdout
    )
    return str(next(item["rule"]["handle"] for item in data["nftables"] if "rule" in item))


def test_nft_chain_layout_of_an_earlier_version_is_removed(node: Namespace) -> None:
    """Attachments stored as chains (conditions, or an earlier pycni) are deleted by DEL and
    GC, and an ADD in the map layout takes over the attachment's own old chain."""
    with node.entered():
        for i in range(4):
            nft_backend.ensure_scaffold(THREAD.nft, fake(i), set())
            nft_chains.add(THREAD.nft, fake(i))  # what an earlier version made
        chains = [nft_chains.chain_name("scalenet", f"cid-{i:04d}", "eth0") for i in range(4)]
        assert NFT.delete(THREAD, fake(0))
        assert nft_chains.chain_rules(THREAD.nft, chains[0]) is None
        with pytest.raises(CNIError, match="already mapped"):
            _add(_same_ports(fake(5), fake(1)))  # held by an old chain: a conflict
        _add(fake(1))  # its own chain: replaced by elements
        assert nft_chains.chain_rules(THREAD.nft, chains[1]) is None
        NFT.check(THREAD, fake(1))
        assert sorted(NFT.gc(THREAD, fake(0), [("cid-0001", "eth0")])) == sorted(chains[2:])
        conditioned = fake(9)
        conditioned.conditions_v4 = rule_matches.parse("conditionsV4", ["iifname", '"eth9"'], 4)[0]
        _add(conditioned)
        assert nft_chains.chain_rules(
            THREAD.nft, nft_chains.chain_name("scalenet", "cid-0009", "eth0")
        )
        NFT.check(THREAD, conditioned)
        with pytest.raises(CNIError, match="already mapped"):
            _add(_same_ports(fake(8), conditioned))
        assert NFT.delete(THREAD, conditioned)
        assert NFT.delete(THREAD, fake(1))
    assert nft_counts(node)[1] == 0


def _same_ports(cfg: PortMapConfig, like: PortMapConfig) -> PortMapConfig:
    cfg.mappings = like.mappings
    return cfg


def _iptables_rules(node: Namespace) -> int:
    total = 0
    for tool in ("iptables-save", "ip6tables-save"):
        text = node.run(tool, "-t", "nat").stdout
        total += sum(1 for line in text.splitlines() if line.startswith("-A "))
    return total


def test_iptables_rules_grow_by_a_constant_per_pod(node: Namespace) -> None:
    counts: dict[int, int] = {}
    with node.entered():
        for i in range(200):
            iptables_backend.add(THREAD.iptables, fake(i, "iptables"))
            if i + 1 in (1, 2, 200):
                counts[i + 1] = _iptables_rules(node)
    per_pod = counts[2] - counts[1]
    # v4: 2 entry + 2 x 3 chain rules; v6: 2 entry + 2 x 2 chain rules
    assert per_pod == 14
    assert counts[200] == counts[1] + 199 * per_pod
    with node.entered():
        removed = iptables_backend.gc(THREAD.iptables, "scalenet", {"cid-0007"})
        assert len(removed) == 199
        iptables_backend.check(THREAD.iptables, fake(7, "iptables"))
        assert iptables_backend.delete(THREAD.iptables, "scalenet", "cid-0007")
    assert _iptables_rules(node) == counts[1] - per_pod
