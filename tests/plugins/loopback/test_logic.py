"""loopback ADD/CHECK/DEL on the fake host (tests/plugin_logic.py): no root."""

from __future__ import annotations

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    POD,
    failed,
    ok,
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
