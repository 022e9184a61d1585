"""sbr ADD/CHECK/DEL on the fake host: no root, no netns.

Chained after a plugin that made the pod interface; here the test makes it (a dummy ``eth0``
with an address and routes) and hands the plugin a prevResult naming it.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import Any

import pytest

from pycni.net.netlink.fake_kernel import FakeKernel
from pycni.net.netlink.kernel import AF_INET6, NetlinkError, Rule
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    CHAINED_PREV,
    POD,
    failed,
    ok,
    picture,
    pod_with_eth0,
    recording_steps,
    with_prev,
)

NET = ipaddress.ip_network
IP = ipaddress.ip_address

PREV = CHAINED_PREV


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
