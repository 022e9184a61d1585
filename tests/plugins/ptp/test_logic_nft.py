"""ptp's ``ipMasq`` (nftables backend) through skel on the fake host's FakeNftables: no root.

The pod's address goes into the network's masquerade set of ``inet cni_plugins_masquerade``
(commented with its attachment), DEL and GC take it out again, the last one the whole table;
a failure injected at each step of ADD leaves links, sysctls and the ruleset as they were.
"""

from __future__ import annotations

from typing import Any

import pytest

from pycni.net.netfilter import ipmasq, model
from pycni.net.netfilter.ipmasq import nft_backend as masq
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD, assert_each_step_rolls_back, ok, with_prev

OTHER_POD = "/run/netns/fakepod2"


def ptp_conf(address: str = "10.23.0.5/24", **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "ptp-net",
        "type": "ptp",
        "ipMasq": True,
        "ipam": {"type": "static", "addresses": [{"address": address, "gateway": "10.23.0.1"}]},
        **extra,
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    host.add_pod(OTHER_POD)
    return host


def masq_elements(host: FakeHost) -> list[tuple[str, str]]:
    with host.node() as kernel:
        nft = host.netfilter(kernel).nft
        if not nft.table_exists("inet", masq.TABLE):
            return []
        found = model.parse(nft.query(f"list table inet {masq.TABLE}"))
    return sorted((str(e.key), e.comment) for s in found.sets for e in s.elements)


def comment(cid: str = "fakecontainer1") -> str:
    return ipmasq.comment_for_instance("ptp-net", "eth0", cid)


def test_ipmasq_add_check_del_gc() -> None:
    host = new_host()
    result = ok(host, "ptp", "ADD", ptp_conf())
    assert masq_elements(host) == [("10.23.0.5", comment())]
    ok(host, "ptp", "CHECK", with_prev(ptp_conf(), result))
    other = ptp_conf("10.23.0.6/24")
    ok(host, "ptp", "ADD", other, pod=OTHER_POD, extra_env={"CNI_CONTAINERID": "other"})
    ok(host, "ptp", "DEL", ptp_conf())
    assert masq_elements(host) == [("10.23.0.6", comment("other"))]
    gc = {**ptp_conf(), "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
    ok(host, "ptp", "GC", gc)
    assert masq_elements(host) == []


@pytest.mark.parametrize("first", [True, False], ids=["fresh", "beside-another-pod"])
def test_a_failure_at_each_step_leaves_node_pod_and_ruleset_as_they_were(first: bool) -> None:
    host = new_host()
    if not first:
        other = ptp_conf("10.23.0.6/24")
        ok(host, "ptp", "ADD", other, pod=OTHER_POD, extra_env={"CNI_CONTAINERID": "other"})
    steps = assert_each_step_rolls_back(host, "ptp", ptp_conf())
    assert "ipmasq" in steps
