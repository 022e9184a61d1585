"""Scale: with hundreds of mapped attachments the ruleset grows by a constant per pod, the
nft transaction of one ADD/DEL has the same size whatever the number of pods, and DEL of
one attachment leaves the others untouched. Fake attachments, added through the backends
directly in a node namespace (no pods needed)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from pycni.plugins.meta.portmap import iptables_backend, nft_backend
from pycni.plugins.meta.portmap.config import PortMapConfig, PortMapping
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
    data: Any = json.loads(node.run("nft", "-j", "list", "table", "inet", "pycni_portmap").stdout)
    items = data["nftables"]
    rules = sum(1 for item in items if "rule" in item)
    elements = sum(len(item["map"].get("elem", [])) for item in items if "map" in item)
    return rules, elements


def test_nft_rules_grow_by_a_constant_per_pod(node: Namespace) -> None:
    counts: dict[int, tuple[int, int]] = {}
    with node.entered():
        for i in range(200):
            nft_backend.add(fake(i))
            if i + 1 in (1, 2, 100, 200):
                counts[i + 1] = nft_counts(node)
    rules_per_pod = counts[2][0] - counts[1][0]
    elems_per_pod = counts[2][1] - counts[1][1]
    assert rules_per_pod == 10  # 2 mappings x (v4: 2 marks + dnat, v6: mark + dnat)
    assert elems_per_pod == 4  # tcp and udp keys in ports4 and ports6
    for n in (100, 200):
        assert counts[n][0] == counts[1][0] + (n - 1) * rules_per_pod
        assert counts[n][1] == counts[1][1] + (n - 1) * elems_per_pod
    # the transaction of pod 0 and pod 199 has the same size
    assert len(nft_backend.add_commands(fake(0))) == len(nft_backend.add_commands(fake(199)))
    with node.entered():
        assert nft_backend.delete("scalenet", "cid-0100", "eth0")
        assert not nft_backend.delete("scalenet", "cid-0100", "eth0")
        nft_backend.check(fake(99))
        nft_backend.check(fake(101))
        assert nft_counts(node) == (
            counts[200][0] - rules_per_pod,
            counts[200][1] - elems_per_pod,
        )
        removed = nft_backend.gc("scalenet", [])
        assert len(removed) == 199
    assert nft_counts(node) == (counts[1][0] - rules_per_pod, 0)


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
            iptables_backend.add(fake(i, "iptables"))
            if i + 1 in (1, 2, 200):
                counts[i + 1] = _iptables_rules(node)
    per_pod = counts[2] - counts[1]
    # v4: 2 entry + 2 x 3 chain rules; v6: 2 entry + 2 x 2 chain rules
    assert per_pod == 14
    assert counts[200] == counts[1] + 199 * per_pod
    with node.entered():
        removed = iptables_backend.gc("scalenet", {"cid-0007"})
        assert len(removed) == 199
        iptables_backend.check(fake(7, "iptables"))
        assert iptables_backend.delete("scalenet", "cid-0007")
    assert _iptables_rules(node) == counts[1] - per_pod
