"""portmap's nftables backend through skel on the fake host's FakeNftables: no root.

What each verb leaves in the node's ruleset, read back the way the kernel answers (held to it
by tests/netfilter/nft_contract.py): the map layout's DNAT and masquerade elements, the chain
layout's per-attachment chain and verdict-map elements, a second attachment beside the first,
a key another attachment holds, GC of a stale attachment, and a failure injected at each step
of ADD leaving the ruleset exactly as it was. TCP mappings only: a UDP one flushes conntrack,
which is the iptables/conntrack half's fake.
"""

from __future__ import annotations

from typing import Any

import pytest

from pycni.net.netfilter import model
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD, call, failed, ok, picture, recording_steps, with_prev
from tests.plugins.portmap.fake_node import node_with_bridge

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
    "ips": [
        {"address": "10.22.0.5/16", "gateway": "10.22.0.1", "interface": 1},
        {"address": "fd22::5/64", "gateway": "fd22::1", "interface": 1},
    ],
}
OTHER = {
    **PREV,
    "ips": [
        {"address": "10.22.0.6/16", "gateway": "10.22.0.1", "interface": 1},
        {"address": "fd22::6/64", "gateway": "fd22::1", "interface": 1},
    ],
}
TCP = [
    {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
    {"hostPort": 8443, "containerPort": 443, "protocol": "tcp", "hostIP": "192.0.2.1"},
]
TABLE = ("inet", "pycni_portmap")


def conf(
    mappings: list[dict[str, Any]] = TCP, prev: dict[str, Any] = PREV, **extra: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap", **extra}
    config["runtimeConfig"] = {"portMappings": mappings}
    return with_prev(config, prev)


def nft(host: FakeHost) -> Any:
    with host.node() as kernel:
        return host.netfilter(kernel).nft


def elements(host: FakeHost, name: str) -> list[tuple[str, str]]:
    """(key, comment) of every element of one of portmap's maps or sets."""
    found = model.parse(nft(host).query(f"list table {' '.join(TABLE)}"))
    out = []
    for named in found.sets:
        if named.name == name:
            for e in named.elements:
                key = e.key.parts if isinstance(e.key, model.Concat) else e.key
                out.append((" . ".join(str(p) for p in key), e.comment))  # type: ignore[union-attr]
    return sorted(out)


def owner(cid: str = "fakecontainer1", ifname: str = "eth0") -> str:
    from pycni.plugins.meta.portmap.nft_maps import owner_name

    return owner_name("pmnet", cid, ifname)


def gc_conf(valid: list[dict[str, str]]) -> dict[str, Any]:
    out = {"cniVersion": "1.1.0", "name": "pmnet", "type": "portmap"}
    return {**out, "cni.dev/valid-attachments": valid}


def test_map_layout_add_check_del() -> None:
    host = node_with_bridge()
    assert ok(host, "portmap", "ADD", conf()) == PREV
    assert elements(host, "dnat4") == [("tcp . 8080", owner())]
    assert elements(host, "dnat4h") == [("192.0.2.1 . tcp . 8443", owner())]
    assert elements(host, "dnat6") == [("tcp . 8080", owner())]
    # hairpin (the pod's /16) and localhost, for each IPv4 mapping
    assert elements(host, "masq4-b13-p16") == [("10.22.0.0 . tcp . 8080", owner())]
    assert elements(host, "masq4-b13-p32") == [("127.0.0.1 . tcp . 8080", owner())]
    assert [r.comment for r in nft(host).chain_rules(*TABLE, "marks")] == [
        "b13 4/16",
        "b13 4/16",
        "b13 4/32",
        "b13 4/32",
        "b13 6/64",
        "b13 6/64",
    ]
    ok(host, "portmap", "CHECK", conf())
    ok(host, "portmap", "DEL", conf())
    assert all(not elements(host, n) for n in ("dnat4", "dnat4h", "dnat6", "masq4-b13-p16"))
    assert "8080" in failed(host, "portmap", "CHECK", conf())
    ok(host, "portmap", "DEL", conf())  # again: nothing left, still fine


def test_a_key_another_attachment_holds_is_refused_and_nothing_changes() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf(prev=OTHER), extra_env={"CNI_CONTAINERID": "other"})
    before = picture(host)
    message = failed(host, "portmap", "ADD", conf())
    assert "already mapped by another attachment" in message and "8080" in message
    assert picture(host) == before
    assert elements(host, "dnat4") == [("tcp . 8080", owner("other"))]


def test_del_without_runtime_config_finds_the_elements_by_owner() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf())
    other = [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]
    ok(host, "portmap", "ADD", conf(other, OTHER), extra_env={"CNI_CONTAINERID": "other"})
    bare = {"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap"}
    ok(host, "portmap", "DEL", bare)
    assert elements(host, "dnat4") == [("tcp . 9090", owner("other"))]
    assert elements(host, "dnat4h") == []


def test_gc_removes_the_attachments_not_listed() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf(TCP[1:]))
    other = [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]
    ok(host, "portmap", "ADD", conf(other, OTHER), extra_env={"CNI_CONTAINERID": "other"})
    ok(host, "portmap", "GC", gc_conf([{"containerID": "fakecontainer1", "ifname": "eth0"}]))
    assert elements(host, "dnat4h") == [("192.0.2.1 . tcp . 8443", owner())]
    assert elements(host, "dnat4") == []


def test_chain_layout_add_check_del() -> None:
    """With conditions the attachment is a chain of its own entered by verdict maps."""
    host = node_with_bridge()
    cond = conf(conditionsV4=["ip", "saddr", "!=", "10.9.0.0/16"])
    ok(host, "portmap", "ADD", cond)
    ruleset = model.parse(nft(host).query(f"list table {' '.join(TABLE)}"))
    chains = [c.name for c in ruleset.chains if c.name.startswith("pm-")]
    assert chains == [owner()]
    vmaps = {s.name: [e.target() for e in s.elements] for s in ruleset.sets if s.map == "verdict"}
    assert vmaps["ports4"] == [owner()] and vmaps["hostip4"] == [owner()]
    ok(host, "portmap", "CHECK", cond)
    ok(host, "portmap", "DEL", cond)
    ruleset = model.parse(nft(host).query(f"list table {' '.join(TABLE)}"))
    assert not [c for c in ruleset.chains if c.name.startswith("pm-")]
    assert all(not s.elements for s in ruleset.sets)


@pytest.mark.parametrize("layout", ["maps", "chain"])
@pytest.mark.parametrize("first", [True, False], ids=["fresh", "beside-another-pod"])
def test_a_failure_at_each_step_leaves_the_ruleset_as_it_was(layout: str, first: bool) -> None:
    host = node_with_bridge()
    extra = {"conditionsV4": ["ip", "saddr", "!=", "10.9.0.0/16"]} if layout == "chain" else {}
    if not first:
        other = [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]
        ok(host, "portmap", "ADD", conf(other, OTHER), extra_env={"CNI_CONTAINERID": "other"})
    with recording_steps() as steps:
        ok(host, "portmap", "ADD", conf(**extra))
    assert steps == ["nftables", "conntrack", "route_localnet"]
    ok(host, "portmap", "DEL", conf(**extra))
    before = picture(host)
    assert before["node"]["netfilter"]  # the shared scaffolding stays, as on a real node
    for step in steps:
        code, reply = call(host, "portmap", "ADD", conf(**extra), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert "rollback incomplete" not in str(reply.get("details", "")), reply
        assert picture(host) == before, step
