"""bridge's nftables work through skel on the fake host's FakeNftables: no root, no netns.

``ipMasq`` on the default nftables backend: the reference's table ``inet
cni_plugins_masquerade`` with pycni's per-network chain and per-subnet set, the pod's address an
element commented with its attachment; the last DEL (and GC of the last attachment) removes it
all. ``macspoofchk``: the reference's ``bridge nat`` chains of the port. Each ADD with a failure
injected at every step leaves links, sysctls and the ruleset exactly as they were, beside
another pod's or on a node without any. The ruleset is read back as the kernel answers (the fake
is held to it by tests/netfilter/nft_contract.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from pycni.net.netfilter import ipmasq, model
from pycni.net.netfilter.ipmasq import nft_backend as masq
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD, assert_each_step_rolls_back, ok, picture, with_prev

OTHER_POD = "/run/netns/fakepod2"


def static(address: str) -> dict[str, Any]:
    return {"type": "static", "addresses": [{"address": address, "gateway": "10.22.0.1"}]}


def bridge_conf(address: str = "10.22.0.5/24", **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "br-net",
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipam": static(address),
        **extra,
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    host.add_pod(OTHER_POD)
    return host


def node_nft(host: FakeHost) -> Any:
    with host.node() as kernel:
        return host.netfilter(kernel).nft


def masq_elements(host: FakeHost) -> list[tuple[str, str]]:
    """(address, comment) of every element of the network's masquerade sets."""
    try:
        found = model.parse(node_nft(host).query(f"list table inet {masq.TABLE}"))
    except OSError:
        return []
    return sorted((str(e.key), e.comment) for s in found.sets for e in s.elements)


def comment(cid: str = "fakecontainer1") -> str:
    return ipmasq.comment_for_instance("br-net", "eth0", cid)


def test_ipmasq_add_check_del() -> None:
    host = new_host()
    config = bridge_conf(ipMasq=True)
    result = ok(host, "bridge", "ADD", config)
    assert masq_elements(host) == [("10.22.0.5", comment())]
    found = model.parse(node_nft(host).query(f"list table inet {masq.TABLE}"))
    chains = {c.name: c for c in found.chains}
    assert chains["postrouting"].hook == "postrouting" and chains["postrouting"].type == "nat"
    jumps = [r for r in found.rules if r.chain == masq.CHAIN]
    assert [r.jumps_to(masq.net_chain("br-net")) for r in jumps] == [True]
    ok(host, "bridge", "CHECK", with_prev(config, result))
    ok(host, "bridge", "DEL", config)
    assert not node_nft(host).table_exists("inet", masq.TABLE)  # the last DEL: no trace
    ok(host, "bridge", "DEL", config)  # again: nothing there, still fine


def test_ipmasq_two_pods_share_the_network_set_and_gc_drops_the_stale_one() -> None:
    host = new_host()
    ok(host, "bridge", "ADD", bridge_conf(ipMasq=True))
    ok(
        host,
        "bridge",
        "ADD",
        bridge_conf("10.22.0.6/24", ipMasq=True),
        pod=OTHER_POD,
        extra_env={"CNI_CONTAINERID": "other"},
    )
    assert masq_elements(host) == [("10.22.0.5", comment()), ("10.22.0.6", comment("other"))]
    gc = {**bridge_conf(ipMasq=True), "cniVersion": "1.1.0"}
    gc["cni.dev/valid-attachments"] = [{"containerID": "other", "ifname": "eth0"}]
    ok(host, "bridge", "GC", gc)
    assert masq_elements(host) == [("10.22.0.6", comment("other"))]
    gc["cni.dev/valid-attachments"] = []
    ok(host, "bridge", "GC", gc)
    assert not node_nft(host).table_exists("inet", masq.TABLE)


def test_macspoofchk_chains_of_the_port() -> None:
    host = new_host()
    config = bridge_conf(macspoofchk=True)
    ok(host, "bridge", "ADD", config)
    found = model.parse(node_nft(host).query("list table bridge nat"))
    ref = "fakecontainer1-eth0"
    names = {c.name for c in found.chains}
    assert {"PREROUTING", f"cni-br-iface-{ref}", f"cni-br-iface-{ref}-mac"} <= names
    base = [r for r in found.rules if r.chain == "PREROUTING"]
    assert [(r.comment, r.jumps_to(f"cni-br-iface-{ref}")) for r in base] == [
        (f"macspoofchk-{ref}", True)
    ]
    mac_rules = [r for r in found.rules if r.chain == f"cni-br-iface-{ref}-mac"]
    assert len(mac_rules) == 2  # the pod's MAC returns, anything else drops
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None
    listed = node_nft(host).query(f"list chain bridge nat cni-br-iface-{ref}-mac")
    assert eth0.mac in str(listed)
    ok(host, "bridge", "DEL", config)
    found = model.parse(node_nft(host).query("list table bridge nat"))
    assert [c.name for c in found.chains] == ["PREROUTING"] and not found.rules


@pytest.mark.parametrize("first", [True, False], ids=["fresh", "beside-another-pod"])
@pytest.mark.parametrize("extra", [{"ipMasq": True}, {"macspoofchk": True}], ids=["ipmasq", "mac"])
def test_a_failure_at_each_step_leaves_node_pod_and_ruleset_as_they_were(
    first: bool, extra: dict[str, Any]
) -> None:
    host = new_host()
    if not first:
        other = bridge_conf("10.22.0.6/24", **extra)
        ok(host, "bridge", "ADD", other, pod=OTHER_POD, extra_env={"CNI_CONTAINERID": "other"})
    steps = assert_each_step_rolls_back(host, "bridge", bridge_conf(**extra))
    assert ("ipmasq" if "ipMasq" in extra else "macspoofchk") in steps
    if not first:  # the other pod's state was there all along
        assert picture(host)["node"]["netfilter"]
