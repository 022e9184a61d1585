"""dummy ADD/CHECK/DEL on the fake host (tests/plugin_logic.py): no root."""

from __future__ import annotations

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


def pod_host(lo_up: bool = False) -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    if not lo_up:
        kernel = host.kernel(POD)
        kernel.set_link(1, up=False)
    return host


def dummy_conf(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "dummy-net",
        "type": "dummy",
        "ipam": {
            "type": "static",
            "addresses": [
                {"address": "10.10.0.2/24", "gateway": "10.10.0.1"},
                {"address": "fd00:10::2/64"},
            ],
            "routes": [{"dst": "192.168.0.0/16"}],
        },
        **extra,
    }


def test_dummy_add_makes_the_link_addresses_and_routes() -> None:
    host = pod_host(lo_up=True)
    before_node = picture(host)["node"]
    result = ok(host, "dummy", "ADD", dummy_conf())
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None and eth0.kind == "dummy" and eth0.up
    assert result["interfaces"] == [{"name": "eth0", "mac": eth0.mac, "sandbox": POD}]
    view = picture(host)[POD]
    assert ("eth0", "10.10.0.2/24", 0) in view["addresses"]
    assert ("eth0", "fd00:10::2/64", 0) in view["addresses"]
    assert ("192.168.0.0/16", "eth0", "10.10.0.1", 3, 0, 1, None, "", 0) in view["routes4"]
    # configure_iface turned keep_addr_on_down on for the IPv6 address, via the pod's sysctl
    assert dict(view["conf"]["eth0"][1])["keep_addr_on_down"] == "1"
    assert dict(view["conf"]["eth0"][0])["arp_notify"] == "0"  # as the reference's dummy
    assert picture(host)["node"] == before_node  # nothing on the node
    assert host.delegations == [("static", "ADD")]
    ok(host, "dummy", "CHECK", with_prev(dummy_conf(), result))


def test_dummy_check_sees_a_changed_pod() -> None:
    host = pod_host(lo_up=True)
    result = ok(host, "dummy", "ADD", dummy_conf())
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    import ipaddress

    pod.delete_address(eth0.index, ipaddress.ip_interface("10.10.0.2/24"))
    assert failed(host, "dummy", "CHECK", with_prev(dummy_conf(), result)) == (
        "Failed to match addr 10.10.0.2/24 on interface eth0"
    )
    pod.set_link(eth0.index, up=False)
    assert failed(host, "dummy", "CHECK", with_prev(dummy_conf(), result)) == (
        "Interface eth0 is down"
    )
    pod.delete_link(eth0.index)
    pod.add_veth("eth0", "peer0", host.pods[POD].fd)
    assert failed(host, "dummy", "CHECK", with_prev(dummy_conf(), result)) == (
        "Error: Container interface eth0 not of type dummy"
    )


def test_dummy_del_is_idempotent() -> None:
    host = pod_host(lo_up=True)
    before = picture(host)
    ok(host, "dummy", "ADD", dummy_conf())
    ok(host, "dummy", "DEL", dummy_conf())
    assert picture(host) == before
    ok(host, "dummy", "DEL", dummy_conf())
    host.remove_pod(POD)
    ok(host, "dummy", "DEL", dummy_conf())
    assert host.delegations[-3:] == [("static", "DEL")] * 3


def test_dummy_refuses_a_taken_name_and_leaves_the_pod() -> None:
    host = pod_host(lo_up=True)
    host.kernel(POD).add_dummy("eth0")
    before = picture(host)
    assert (
        failed(host, "dummy", "ADD", dummy_conf()) == "failed to create dummy: (17, 'File exists')"
    )
    assert picture(host) == before


def test_dummy_needs_ipam() -> None:
    host = pod_host(lo_up=True)
    conf = dummy_conf()
    del conf["ipam"]
    assert failed(host, "dummy", "ADD", conf) == "dummy interface requires an IPAM configuration"


def test_dummy_a_failure_at_each_step_leaves_the_pod_as_it_was() -> None:
    host = pod_host(lo_up=True)
    steps = assert_each_step_rolls_back(host, "dummy", dummy_conf())
    assert steps == ["create", "ipam", "configure"]
