"""loopback and dummy ADD/CHECK/DEL on the fake host (tests/plugin_logic.py): no root."""

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

LOOPBACK = {"cniVersion": "1.0.0", "name": "lo-net", "type": "loopback"}


def pod_host(lo_up: bool = False) -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    if not lo_up:
        kernel = host.kernel(POD)
        kernel.set_link(1, up=False)
    return host


def test_loopback_add_brings_lo_up_and_reports_its_addresses() -> None:
    host = pod_host()
    result = ok(host, "loopback", "ADD", LOOPBACK)
    lo = host.kernel(POD).link(1)
    assert lo.up
    assert result["interfaces"] == [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": POD}]
    assert [ip["address"] for ip in result["ips"]] == ["127.0.0.1/8", "::1/128"]
    ok(host, "loopback", "CHECK", with_prev(LOOPBACK, result))


def test_loopback_check_fails_once_lo_is_down_and_del_is_idempotent() -> None:
    host = pod_host()
    result = ok(host, "loopback", "ADD", LOOPBACK)
    ok(host, "loopback", "DEL", LOOPBACK)
    assert not host.kernel(POD).link(1).up
    assert failed(host, "loopback", "CHECK", with_prev(LOOPBACK, result)) == (
        "loopback interface is down"
    )
    ok(host, "loopback", "DEL", LOOPBACK)
    host.remove_pod(POD)
    ok(host, "loopback", "DEL", LOOPBACK)  # the namespace is gone: nothing to do


def test_loopback_refuses_a_foreign_address_on_lo() -> None:
    host = pod_host()
    kernel = host.kernel(POD)
    import ipaddress

    kernel.add_address(1, ipaddress.ip_interface("10.9.9.9/32"))
    assert failed(host, "loopback", "ADD", LOOPBACK) == (
        'loopback interface found with non-loopback address "10.9.9.9"'
    )


def test_loopback_passes_a_prev_result_through() -> None:
    host = pod_host()
    prev = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": POD}],
        "ips": [{"address": "10.1.0.5/24", "interface": 0}],
    }
    assert ok(host, "loopback", "ADD", with_prev(LOOPBACK, prev)) == prev


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
