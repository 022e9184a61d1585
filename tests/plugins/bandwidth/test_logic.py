"""bandwidth ADD/CHECK/DEL on the fake host: no root, no netns.

Chained after a plugin that made a veth pair; here the test makes it (the node's ``vethhost0``,
the pod's ``eth0``) and hands the plugin a prevResult naming both.
"""

from __future__ import annotations

from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    POD,
    failed,
    ok,
    picture,
    recording_steps,
    with_prev,
)


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
