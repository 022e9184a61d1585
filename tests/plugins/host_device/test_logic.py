"""host-device ADD/CHECK/DEL/GC on the fake host: no root, no netns.

The node has one Ethernet-like link (``ens3``, a dummy in the fake) that host-device
moves into the pod and back.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from tests.plugin_logic import (
    POD,
    assert_each_step_rolls_back,
    failed,
    ok,
    picture,
    with_prev,
)
from tests.plugins.sublink_cases import (  # noqa: F401  (the shared cases run here)
    STATIC,
    conf,
    hostdev_conf,
    new_host,
    test_gc_goes_on_to_the_ipam_plugin,
)


@pytest.fixture
def plugin() -> str:
    """The plugin type the shared cases of tests/plugins/sublink_cases.py run with here."""
    return "host-device"


def test_host_device_moves_the_link_in_and_back(tmp_path: Path) -> None:
    host = new_host()
    node = host.kernel()
    ens3 = node.find_link("ens3")
    assert ens3 is not None
    node.add_address(ens3.index, ipaddress.ip_interface("192.0.2.7/24"))
    before = picture(host)
    result = ok(host, "host-device", "ADD", hostdev_conf(tmp_path))
    assert node.find_link("ens3") is None
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.kind == "dummy" and eth0.up and eth0.alias == "ens3"
    assert ("eth0", "10.44.0.5/24", 0) in picture(host)[POD]["addresses"]
    ok(host, "host-device", "CHECK", with_prev(hostdev_conf(tmp_path), result))
    ok(host, "host-device", "DEL", hostdev_conf(tmp_path))
    assert picture(host) == before  # back under its name, with its address, up
    ok(host, "host-device", "DEL", hostdev_conf(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_host_device_check_fails_on_a_changed_pod(tmp_path: Path) -> None:
    host = new_host()
    result = ok(host, "host-device", "ADD", hostdev_conf(tmp_path))
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.set_link(eth0.index, mac="02:00:00:00:00:99")
    assert failed(host, "host-device", "CHECK", with_prev(hostdev_conf(tmp_path), result)) == (
        f"Interface eth0 Mac {eth0.mac} doesn't match container Mac: 02:00:00:00:00:99"
    )
    pod.set_link(eth0.index, mac=eth0.mac)
    pod.delete_address(eth0.index, ipaddress.ip_interface("10.44.0.5/24"))
    assert "Failed to match addr 10.44.0.5/24 on interface eth0" in failed(
        host, "host-device", "CHECK", with_prev(hostdev_conf(tmp_path), result)
    )
    ok(host, "host-device", "DEL", hostdev_conf(tmp_path))


def test_host_device_a_failure_at_each_step_leaves_node_and_pod_as_they_were(
    tmp_path: Path,
) -> None:
    host = new_host()
    steps = assert_each_step_rolls_back(host, "host-device", hostdev_conf(tmp_path))
    assert steps[:3] == ["save", "move", "up"]
    assert list(tmp_path.iterdir()) == []
