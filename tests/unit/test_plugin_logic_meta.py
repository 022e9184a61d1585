"""sbr and tuning ADD/CHECK/DEL on the fake host: no root, no netns.

Both are chained after a plugin that made the pod interface; here the test makes it (a dummy
``eth0`` with an address and routes) and hands the plugins a prevResult naming it.
"""

from __future__ import annotations

import errno
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from pycni.net.netlink.fake_kernel import FakeKernel
from pycni.net.netlink.kernel import AF_INET6, NetlinkError, Route, Rule
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    POD,
    assert_each_step_rolls_back,
    failed,
    ok,
    picture,
    recording_steps,
    with_prev,
)

NET = ipaddress.ip_network
IP = ipaddress.ip_address

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": POD}],
    "ips": [{"address": "10.55.0.5/24", "gateway": "10.55.0.1", "interface": 0}],
}


def pod_with_eth0() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    pod = host.kernel(POD)
    pod.add_dummy("eth0")
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.set_link(eth0.index, up=True)
    pod.add_address(eth0.index, ipaddress.ip_interface("10.55.0.5/24"))
    pod.add_route(Route(NET("0.0.0.0/0"), oif=eth0.index, gateway=IP("10.55.0.1")))
    pod.add_route(Route(NET("172.16.0.0/12"), oif=eth0.index, gateway=IP("10.55.0.254")))
    return host


SBR = with_prev({"cniVersion": "1.0.0", "name": "sbr-net", "type": "sbr"}, PREV)


def test_sbr_moves_the_interface_routes_into_a_table_behind_a_source_rule() -> None:
    host = pod_with_eth0()
    assert ok(host, "sbr", "ADD", SBR) == PREV
    rules4 = picture(host)[POD]["rules"][0]
    assert rules4 == [
        (-1, 255, ""),
        (32765, 100, "10.55.0.5/32"),
        (32766, 254, ""),
        (32767, 253, ""),
    ]
    table100 = {(str(r.dst), str(r.gateway or "")) for r in host.kernel(POD).routes(2, table=100)}
    assert table100 == {
        ("0.0.0.0/0", "10.55.0.1"),
        ("10.55.0.0/24", ""),
        ("172.16.0.0/12", "10.55.0.254"),
    }
    in_main = {(str(r.dst), str(r.gateway or "")) for r in host.kernel(POD).routes(2, table=254)}
    assert in_main == set()  # every route of eth0 left the main table


def test_sbr_del_removes_the_rule_and_is_idempotent() -> None:
    host = pod_with_eth0()
    ok(host, "sbr", "ADD", SBR)
    ok(host, "sbr", "DEL", SBR)
    assert not [r for r in host.kernel(POD).rules(2) if r.src is not None]
    after = picture(host)
    ok(host, "sbr", "DEL", SBR)
    assert picture(host) == after
    host.remove_pod(POD)
    ok(host, "sbr", "DEL", SBR)


def test_sbr_a_failure_at_each_step_leaves_the_pod_as_it_was() -> None:
    host = pod_with_eth0()
    before = picture(host)
    with recording_steps() as steps:
        ok(host, "sbr", "ADD", SBR)
    # sbr's DEL does not put routes back (nor does the reference's): a fresh pod per step
    assert steps[:2] == ["rule", "default-route"]
    for step in steps:
        host = pod_with_eth0()
        assert f"injected failure at step {step!r}" in failed(host, "sbr", "ADD", SBR, fail_at=step)
        assert picture(host) == before, step


def test_sbr_without_the_interface_is_an_error() -> None:
    host = FakeHost()
    host.add_pod(POD)
    assert failed(host, "sbr", "ADD", SBR) == "Cannot find network interface eth0"


def tuning_conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return with_prev(
        {
            "cniVersion": "1.0.0",
            "name": "tuning-net",
            "type": "tuning",
            "dataDir": str(tmp_path),
            "sysctl": {
                "net.ipv4.conf.IFNAME.arp_ignore": "1",
                "net.ipv6.conf.IFNAME.accept_ra": "0",
            },
            "mtu": 1400,
            "promisc": True,
            **extra,
        },
        PREV,
    )


def test_tuning_sets_sysctls_and_link_attributes_and_del_puts_them_back(tmp_path: Path) -> None:
    host = pod_with_eth0()
    before = picture(host)
    conf = tuning_conf(tmp_path)
    assert ok(host, "tuning", "ADD", conf) == PREV
    pod = host.kernel(POD)
    sysctl = host.pods[POD].sysctl
    assert sysctl.read("net/ipv4/conf/eth0/arp_ignore") == "1"
    assert sysctl.read("net/ipv6/conf/eth0/accept_ra") == "0"
    eth0 = pod.find_link("eth0")
    assert eth0 is not None and eth0.mtu == 1400 and eth0.promiscuity == 1
    ok(host, "tuning", "CHECK", conf)
    sysctl.write("net/ipv6/conf/eth0/accept_ra", "1")
    assert failed(host, "tuning", "CHECK", conf) == (
        "Error: Tuning configured value of /proc/sys/net/ipv6/conf/eth0/accept_ra is 0, "
        "current value is 1"
    )
    ok(host, "tuning", "DEL", conf)
    after = picture(host)
    assert after == before
    ok(host, "tuning", "DEL", conf)
    assert picture(host) == before
    assert host.files.tree(str(tmp_path)) == {}  # the backup went with DEL


def test_tuning_refuses_a_sysctl_the_pod_does_not_have(tmp_path: Path) -> None:
    host = pod_with_eth0()
    before = picture(host)
    conf = tuning_conf(tmp_path, sysctl={"net.ipv6.conf.nosuch0.accept_ra": "0"})
    assert failed(host, "tuning", "ADD", conf) == (
        'sysctl "net.ipv6.conf.nosuch0.accept_ra" does not exist in the pod namespace'
    )
    assert picture(host) == before


def test_tuning_a_failure_at_each_step_leaves_the_pod_as_it_was(tmp_path: Path) -> None:
    host = pod_with_eth0()
    steps = assert_each_step_rolls_back(host, "tuning", tuning_conf(tmp_path))
    assert steps[:2] == ["backup", "sysctl"]
    assert host.files.tree(str(tmp_path)) == {}  # the backup went with DEL


def pod_behind_a_veth() -> tuple[FakeHost, dict[str, Any]]:
    """A pod whose eth0 is the peer of the node's ``vethhost0``, and the prevResult naming it."""
    host = FakeHost()
    pod_ns = host.add_pod(POD)
    node = host.kernel()
    node.add_veth("vethhost0", "eth0", pod_ns.fd)
    prev = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "vethhost0"}, {"name": "eth0", "sandbox": POD}],
        "ips": [{"address": "10.55.0.5/24", "interface": 1}],
    }
    return host, prev


def bandwidth_conf(prev: dict[str, Any], **limits: int) -> dict[str, Any]:
    return with_prev({"cniVersion": "1.0.0", "name": "bw-net", "type": "bandwidth", **limits}, prev)


BOTH = {
    "ingressRate": 8_000_000,
    "ingressBurst": 80_000,
    "egressRate": 16_000_000,
    "egressBurst": 160_000,
}


def test_bandwidth_shapes_both_directions_and_del_removes_the_ifb() -> None:
    host, prev = pod_behind_a_veth()
    before = picture(host)
    conf = bandwidth_conf(prev, **BOTH)
    result = ok(host, "bandwidth", "ADD", conf)
    node = host.kernel()
    ifb_name = result["interfaces"][-1]["name"]
    assert ifb_name.startswith("bwp")
    view = picture(host)["node"]
    assert ("vethhost0", "tbf", 0xFFFFFFFF) in view["qdiscs"]  # ingress: on the host end
    assert ("vethhost0", "ingress", 0xFFFFFFF1) in view["qdiscs"]
    assert (ifb_name, "tbf", 0xFFFFFFFF) in view["qdiscs"]  # egress: on the ifb
    host_end, ifb = node.find_link("vethhost0"), node.find_link(ifb_name)
    assert host_end is not None and ifb is not None
    assert node.redirect_of(host_end.index) == ifb.index
    ok(host, "bandwidth", "CHECK", conf)
    assert failed(
        host, "bandwidth", "CHECK", bandwidth_conf(prev, **{**BOTH, "egressRate": 24_000_000})
    ) == ("Rate doesn't match")
    ok(host, "bandwidth", "DEL", conf)
    after = picture(host)
    assert node.find_link(ifb_name) is None
    assert after["node"]["qdiscs"] == [
        ("vethhost0", "ingress", 0xFFFFFFF1),
        ("vethhost0", "tbf", 0xFFFFFFFF),
    ]
    ok(host, "bandwidth", "DEL", conf)
    assert picture(host) == after
    assert before["node"]["qdiscs"] == []


def test_bandwidth_a_failure_at_each_step_leaves_the_node_as_it_was() -> None:
    host, prev = pod_behind_a_veth()
    conf = bandwidth_conf(prev, **BOTH)
    before = picture(host)
    with recording_steps() as steps:
        ok(host, "bandwidth", "ADD", conf)
    assert steps == ["ingress-tbf", "ifb", "redirect", "egress-tbf"]
    for step in steps:  # DEL leaves the host end's qdiscs (as the reference): a fresh host each
        host, prev = pod_behind_a_veth()
        assert f"injected failure at step {step!r}" in failed(
            host, "bandwidth", "ADD", bandwidth_conf(prev, **BOTH), fail_at=step
        )
        assert picture(host) == before, step


VRF = with_prev({"cniVersion": "1.0.0", "name": "vrf-net", "type": "vrf", "vrfname": "blue"}, PREV)


def test_vrf_puts_the_interface_and_its_routes_into_a_new_vrf() -> None:
    host = pod_with_eth0()
    assert ok(host, "vrf", "ADD", VRF) == PREV
    pod = host.kernel(POD)
    blue, eth0 = pod.find_link("blue"), pod.find_link("eth0")
    assert blue is not None and eth0 is not None
    assert blue.kind == "vrf" and blue.vrf_table == 1 and blue.up  # the lowest free table
    assert eth0.master == blue.index and eth0.up
    table1 = {(str(r.dst), str(r.gateway or "")) for r in pod.routes(2, table=1)}
    assert table1 == {
        ("0.0.0.0/0", "10.55.0.1"),
        ("10.55.0.0/24", ""),
        ("172.16.0.0/12", "10.55.0.254"),
    }
    assert pod.routes(2, table=254) == []
    ok(host, "vrf", "CHECK", VRF)
    other = with_prev({**VRF, "vrfname": "red"}, PREV)
    assert failed(host, "vrf", "CHECK", other) == "Link not found"


def test_vrf_del_takes_the_interface_out_and_removes_the_empty_vrf() -> None:
    host = pod_with_eth0()
    ok(host, "vrf", "ADD", VRF)
    ok(host, "vrf", "DEL", VRF)
    pod = host.kernel(POD)
    assert pod.find_link("blue") is None
    eth0 = pod.find_link("eth0")
    assert eth0 is not None and eth0.master == 0
    main = {(str(r.dst), str(r.gateway or "")) for r in pod.routes(2, table=254)}
    assert main == {
        ("0.0.0.0/0", "10.55.0.1"),
        ("10.55.0.0/24", ""),
        ("172.16.0.0/12", "10.55.0.254"),
    }
    after = picture(host)
    ok(host, "vrf", "DEL", VRF)
    assert picture(host) == after
    host.remove_pod(POD)
    ok(host, "vrf", "DEL", VRF)


def test_vrf_refuses_a_name_that_is_no_vrf() -> None:
    host = pod_with_eth0()
    host.kernel(POD).add_dummy("blue")
    before = picture(host)
    assert "names a link of the pod that is not a VRF" in failed(host, "vrf", "ADD", VRF)
    assert picture(host) == before


def test_vrf_a_failure_at_each_step_leaves_the_pod_as_it_was() -> None:
    host = pod_with_eth0()
    before = picture(host)
    with recording_steps() as steps:
        ok(host, "vrf", "ADD", VRF)
    assert steps == ["create", "enslave"]
    for step in steps:
        host = pod_with_eth0()
        assert f"injected failure at step {step!r}" in failed(host, "vrf", "ADD", VRF, fail_at=step)
        after = picture(host)
        if step != "create":
            # the l3mdev rule the kernel added with the first VRF stays after it (as on Linux)
            v4, v6 = after[POD]["rules"]
            assert (1000, 0, "") in v4 and (1000, 0, "") in v6
            after[POD]["rules"] = tuple([r for r in x if r != (1000, 0, "")] for x in (v4, v6))
        assert after == before, step


DUAL = {
    **PREV,
    "ips": [*PREV["ips"], {"address": "fd00:55::5/64", "interface": 0}],  # type: ignore[misc]
}
SBR_TABLE = with_prev(
    {"cniVersion": "1.0.0", "name": "sbr-net", "type": "sbr", "table": 4242}, DUAL
)


def dual_pod() -> FakeHost:
    host = pod_with_eth0()
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.add_address(eth0.index, ipaddress.ip_interface("fd00:55::5/64"))
    return host


def test_sbr_table_adds_rules_to_that_table_and_moves_no_route() -> None:
    host = dual_pod()
    before = picture(host)
    assert ok(host, "sbr", "ADD", SBR_TABLE) == DUAL
    after = picture(host)
    assert (after[POD]["routes4"], after[POD]["routes6"]) == (
        before[POD]["routes4"],
        before[POD]["routes6"],
    )
    new = [
        [rule for rule in after[POD]["rules"][family] if rule not in before[POD]["rules"][family]]
        for family in (0, 1)
    ]
    assert [[(table, src) for _prio, table, src in rules] for rules in new] == [
        [(4242, "10.55.0.5/32")],
        [(4242, "fd00:55::5/128")],
    ]
    ok(host, "sbr", "DEL", SBR_TABLE)
    assert picture(host) == before


def test_sbr_table_del_leaves_the_rules_of_other_tables() -> None:
    """v1.9.1's DEL with ``table`` lists that table's rules only."""
    host = dual_pod()
    ok(host, "sbr", "ADD", SBR)  # table 100, from 10.55.0.5
    moved = picture(host)
    ok(host, "sbr", "ADD", SBR_TABLE)
    ok(host, "sbr", "DEL", SBR_TABLE)
    assert picture(host) == moved
    ok(host, "sbr", "DEL", SBR)
    assert not [r for r in host.kernel(POD).rules(2) if r.src is not None]


def test_sbr_table_a_refused_second_rule_takes_the_first_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = dual_pod()
    before = picture(host)
    real = FakeKernel.add_rule

    def refuse_ipv6(self: FakeKernel, rule: Rule) -> None:
        if rule.family == AF_INET6:
            raise NetlinkError(errno.EAFNOSUPPORT)
        real(self, rule)

    monkeypatch.setattr(FakeKernel, "add_rule", refuse_ipv6)
    msg = failed(host, "sbr", "ADD", SBR_TABLE)
    assert msg.startswith("failed to add rule:"), msg
    assert picture(host) == before


@pytest.mark.parametrize("table", [0, -1, 2**32, "100", 1.5, False])
def test_sbr_refuses_a_table_that_is_no_kernel_table(table: Any) -> None:
    host = dual_pod()
    before = picture(host)
    for command in ("ADD", "DEL"):
        msg = failed(host, "sbr", command, {**SBR_TABLE, "table": table})
        assert msg.startswith("invalid config: table must be a number in [1, 4294967295]"), msg
        assert picture(host) == before
