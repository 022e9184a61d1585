"""vrf ADD/CHECK/DEL on the fake host: no root, no netns.

Chained after a plugin that made the pod interface; here the test makes it (a dummy ``eth0``
with an address and routes) and hands the plugin a prevResult naming it.
"""

from __future__ import annotations

import ipaddress

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
