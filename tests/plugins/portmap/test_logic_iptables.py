"""portmap's iptables backend and its conntrack flushes through skel on a FakeHost: no root.

The node's nat tables are its FakeIptables and its conntrack table a FakeConntrack
(pycni.net.netfilter.fake_iptables, held to the real tools and kernel by
tests/netfilter/iptables_contract.py): ADD's chains and rules in both families, CHECK, the UDP
flush of stale entries to the host ports, the configured iptables variant, a failure injected
at each step leaving tables and conntrack as they were (on a fresh node, and beside another
pod that shares the scaffolding). DEL and GC, which also clear nftables state (a config that
changed backend, the reference's layouts) on the same host's FakeNftables.
"""

from __future__ import annotations

from typing import Any

from pycni.net.netfilter.iptables_script import IptablesError
from pycni.plugins.meta.portmap import iptables_backend
from tests.iptables_logic import conntrack_of, iptables_of, whole_picture
from tests.plugin_logic import POD, call, failed, ok, recording_steps, with_prev
from tests.plugins.portmap.fake_node import node_with_bridge

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
    "ips": [
        {"address": "10.22.0.5/16", "gateway": "10.22.0.1", "interface": 1},
        {"address": "fd22::5/64", "gateway": "fd22::1", "interface": 1},
    ],
}
TCP = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
UDP = [{"hostPort": 8053, "containerPort": 53, "protocol": "udp"}]
DNAT = "CNI-HOSTPORT-DNAT"
CID = "fakecontainer1"


def conf(
    mappings: list[dict[str, Any]] | None = TCP, prev: dict[str, Any] = PREV, **extra: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "pmnet",
        "type": "portmap",
        "backend": "iptables",
        **extra,
    }
    if mappings is not None:
        config["runtimeConfig"] = {"portMappings": mappings}
    return with_prev(config, prev)


def other_pod() -> dict[str, Any]:
    prev = {**PREV, "ips": [{"address": "10.22.0.9/16", "gateway": "10.22.0.1", "interface": 1}]}
    return conf([{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}], prev)


def test_add_writes_the_references_chains_in_both_families_and_check_finds_them() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf(TCP + UDP))
    ipt = iptables_of(host)
    chain = iptables_backend.dnat_chain("pmnet", CID)
    for family, ip in ((4, "10.22.0.5"), (6, "[fd22::5]")):
        saved = ipt.save("nat", family)
        assert {DNAT, chain, "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"} <= saved.chains
        for hook in ("PREROUTING", "OUTPUT"):
            assert saved.jumps_to(hook, DNAT) == [
                f"-A {hook} -m addrtype --dst-type LOCAL -j {DNAT}"
            ]
        assert len(saved.jumps_to(DNAT, chain)) == 2  # one entry rule per protocol
        dnat = [r for r in saved.rules_of(chain) if " -j DNAT " in r]
        assert [r.split(" -j DNAT ")[1] for r in dnat] == [
            f"--to-destination {ip}:80",
            f"--to-destination {ip}:53",
        ]
        assert saved.jumps_to("POSTROUTING", "CNI-HOSTPORT-MASQ")
    assert [(family, variant) for _s, family, variant in ipt.restores] == [(4, "nft"), (6, "nft")]
    assert iptables_of(host).tables  # the node's, not a pod's:
    assert iptables_of(host, POD).picture() == {}
    ok(host, "portmap", "CHECK", conf(TCP + UDP))


def test_check_fails_when_a_rule_went_missing() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf())
    chain = iptables_backend.dnat_chain("pmnet", CID)
    ipt = iptables_of(host)
    dnat = ipt.save("nat", 4).rules_of(chain)[-1]
    ipt.restore(f"*nat\n-D {dnat[3:]}\nCOMMIT\n", 4)
    assert "rule missing (IPv4)" in failed(host, "portmap", "CHECK", conf())


def test_a_second_pod_shares_the_scaffolding() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf())
    ok(host, "portmap", "ADD", other_pod(), extra_env={"CNI_CONTAINERID": "other"})
    saved = iptables_of(host).save("nat", 4)
    mine, theirs = (iptables_backend.dnat_chain("pmnet", c) for c in (CID, "other"))
    assert saved.jumps_to(DNAT, mine) and saved.jumps_to(DNAT, theirs)
    assert len(saved.jumps_to("PREROUTING", DNAT)) == 1
    assert len(saved.jumps_to("POSTROUTING", "CNI-HOSTPORT-MASQ")) == 1


def test_udp_mappings_flush_stale_conntrack_entries_to_the_host_ports() -> None:
    host = node_with_bridge()
    ct = conntrack_of(host)
    ct.add("udp", "10.9.0.1", "192.168.1.1", 1000, 8053)  # stale: bypasses the new DNAT
    ct.add("udp", "fd09::1", "fd00::1", 1001, 8053)
    ct.add("tcp", "10.9.0.1", "192.168.1.1", 1002, 8053)  # not UDP
    ct.add("udp", "10.9.0.1", "192.168.1.1", 1003, 9999)  # another port
    ok(host, "portmap", "ADD", conf(UDP + TCP))
    assert sorted((e.protocol, e.dport) for e in ct.entries) == [("tcp", 8053), ("udp", 9999)]
    assert conntrack_of(host, POD).entries == []


def test_a_failed_conntrack_flush_is_only_logged() -> None:
    host = node_with_bridge()
    conntrack_of(host).broken = OSError(1, "Operation not permitted")
    ok(host, "portmap", "ADD", conf(UDP))
    ok(host, "portmap", "CHECK", conf(UDP))


def test_the_configured_variant_holds_the_rules() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf(iptablesVariant="legacy"))
    assert {key.split()[0] for key in iptables_of(host).picture()} == {"legacy"}
    ok(host, "portmap", "CHECK", conf(iptablesVariant="legacy"))
    assert "is missing" in failed(host, "portmap", "CHECK", conf(iptablesVariant="nft"))


def test_a_missing_external_mark_chain_is_refused_before_anything_changes() -> None:
    host = node_with_bridge()
    before = whole_picture(host)
    msg = failed(host, "portmap", "ADD", conf(externalSetMarkChain="KUBE-MARK-MASQ"))
    assert "externalSetMarkChain" in msg and "KUBE-MARK-MASQ" in msg
    assert whole_picture(host) == before


def test_a_failure_at_each_step_of_a_first_add_leaves_nothing() -> None:
    with recording_steps() as steps:
        ok(node_with_bridge(), "portmap", "ADD", conf(UDP + TCP))
    assert steps == ["iptables4", "iptables6", "conntrack", "route_localnet"]
    for step in steps:
        host = node_with_bridge()
        before = whole_picture(host)
        code, reply = call(host, "portmap", "ADD", conf(UDP + TCP), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert whole_picture(host) == before, step  # scaffolding, chain and route_localnet


def test_a_failure_at_each_step_beside_another_pod_keeps_its_mappings() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", other_pod(), extra_env={"CNI_CONTAINERID": "other"})
    before = whole_picture(host)
    for step in ("iptables4", "iptables6", "conntrack", "route_localnet"):
        code, reply = call(host, "portmap", "ADD", conf(UDP + TCP), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert whole_picture(host) == before, step


def test_a_refused_restore_in_the_second_family_undoes_the_first() -> None:
    host = node_with_bridge()
    before = whole_picture(host)
    iptables_of(host).failures = [None, IptablesError("ip6tables-restore failed (4): busy")]
    msg = failed(host, "portmap", "ADD", conf())
    assert msg == "portmap: iptables ADD failed: ip6tables-restore failed (4): busy"
    assert whole_picture(host) == before  # IPv4's chain and scaffolding went again


def test_del_removes_the_pods_chain_and_udp_flows_and_keeps_the_scaffolding() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf(UDP + TCP))
    ok(host, "portmap", "ADD", other_pod(), extra_env={"CNI_CONTAINERID": "other"})
    ct = conntrack_of(host)
    ct.add("udp", "10.9.0.1", "192.168.1.1", 1000, 8053, reply_src="10.22.0.5")  # DNATed to it
    ct.add("udp", "10.22.0.5", "9.9.9.9", 1001, 53)  # its own flow
    ct.add("udp", "10.9.0.1", "192.168.1.1", 1002, 9090, reply_src="10.22.0.9")  # the other's
    ok(host, "portmap", "DEL", conf(UDP + TCP))
    saved = iptables_of(host).save("nat", 4)
    assert iptables_backend.dnat_chain("pmnet", CID) not in saved.chains
    assert saved.jumps_to(DNAT, iptables_backend.dnat_chain("pmnet", "other"))
    assert [e.reply_src for e in ct.entries] == ["10.22.0.9"]
    ok(host, "portmap", "DEL", conf(UDP + TCP))  # again: nothing left to remove


def test_gc_removes_the_chains_of_attachments_no_longer_valid() -> None:
    host = node_with_bridge()
    ok(host, "portmap", "ADD", conf())
    ok(host, "portmap", "ADD", other_pod(), extra_env={"CNI_CONTAINERID": "other"})
    gc = {**conf(None), "cniVersion": "1.1.0"}
    gc["cni.dev/valid-attachments"] = [{"containerID": "other", "ifname": "eth0"}]
    ok(host, "portmap", "GC", gc)
    chains = iptables_of(host).save("nat", 4).chains
    assert iptables_backend.dnat_chain("pmnet", CID) not in chains
    assert iptables_backend.dnat_chain("pmnet", "other") in chains
