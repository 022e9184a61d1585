"""ptp ADD/CHECK/DEL on the fake host (tests/plugin_logic.py): no root, no netns.

What the fake ends up with is the plugin's decision: the veth pair and which end is where, the
pod's addresses and routes, the node's routes and forwarding switches. ipMasq (nftables) is not
faked and stays out of these configs.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    POD,
    assert_each_step_rolls_back,
    failed,
    ok,
    picture,
    with_prev,
)


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def ptp_conf(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "ptp-net",
        "type": "ptp",
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.33.0.5/24", "gateway": "10.33.0.1"}],
        },
        **extra,
    }


def test_ptp_add_routes_the_pod_through_its_host_end() -> None:
    host = new_host()
    result = ok(host, "ptp", "ADD", ptp_conf(mtu=1400))
    node = host.kernel()
    host_end = next(x for x in node.links() if x.kind == "veth")
    assert host_end.mtu == 1400
    view = picture(host)
    assert (host_end.name, "10.33.0.1/32", 0) in view["node"]["addresses"]
    assert any(r[0] == "10.33.0.5/32" and r[1] == host_end.name for r in view["node"]["routes4"])
    assert node.forwarding(2) == 1
    pod_routes = {(r[0], r[2]) for r in view[POD]["routes4"]}
    assert ("10.33.0.1/32", "") in pod_routes
    assert ("10.33.0.0/24", "10.33.0.1") in pod_routes
    assert [i["name"] for i in result["interfaces"]] == [host_end.name, "eth0"]
    ok(host, "ptp", "CHECK", with_prev(ptp_conf(mtu=1400), result))
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.delete_address(eth0.index, ipaddress.ip_interface("10.33.0.5/24"))
    assert "Failed to match addr 10.33.0.5/24" in failed(
        host, "ptp", "CHECK", with_prev(ptp_conf(mtu=1400), result)
    )


def test_ptp_del_is_idempotent() -> None:
    host = new_host()
    before = picture(host)
    ok(host, "ptp", "ADD", ptp_conf())
    ok(host, "ptp", "DEL", ptp_conf())
    after = picture(host)
    assert after["node"]["links"] == before["node"]["links"]
    assert after[POD] == before[POD]
    ok(host, "ptp", "DEL", ptp_conf())
    host.remove_pod(POD)
    ok(host, "ptp", "DEL", ptp_conf())


def test_ptp_a_failure_at_each_step_leaves_node_and_pod_as_they_were() -> None:
    host = new_host()
    steps = assert_each_step_rolls_back(host, "ptp", ptp_conf())
    assert steps[:3] == ["ipam", "forwarding", "veth"]
