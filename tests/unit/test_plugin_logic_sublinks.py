"""macvlan, ipvlan, vlan and host-device ADD/CHECK/DEL on the fake host: no root, no netns.

The node has one Ethernet-like link (``ens3``, a dummy in the fake) that the sub-interfaces
hang off or that host-device moves into the pod.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    POD,
    assert_each_step_rolls_back,
    failed,
    ok,
    picture,
    with_prev,
)

STATIC = {"type": "static", "addresses": [{"address": "10.44.0.5/24", "gateway": "10.44.0.1"}]}


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    node = host.kernel()
    node.add_dummy("ens3", mtu=9000)
    found = node.find_link("ens3")
    assert found is not None
    node.set_link(found.index, up=True)
    return host


def conf(plugin: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": f"{plugin}-net",
        "type": plugin,
        "master": "ens3",
        "ipam": STATIC,
    }
    if plugin == "vlan":
        base["vlanId"] = 42
    return {**base, **extra}


KINDS = {"macvlan": "macvlan", "ipvlan": "ipvlan", "vlan": "vlan"}


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_add_makes_the_sublink_in_the_pod_with_ipam_addresses(plugin: str) -> None:
    host = new_host()
    node_before = picture(host)["node"]
    result = ok(host, plugin, "ADD", conf(plugin, mtu=1500))
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    assert eth0.kind == KINDS[plugin] and eth0.up and eth0.mtu == 1500
    assert eth0.peer_netnsid is not None  # its lower link is in another namespace: the node
    if plugin == "vlan":
        assert eth0.vlan_id == 42
    view = picture(host)
    assert ("eth0", "10.44.0.5/24", 0) in view[POD]["addresses"]
    assert [name for name, *_ in view[POD]["links"]] == ["eth0", "lo"]  # the temporary name went
    assert view["node"] == node_before  # the master is untouched
    assert result["interfaces"] == [{"name": "eth0", "mac": eth0.mac, "sandbox": POD}]
    ok(host, plugin, "CHECK", with_prev(conf(plugin, mtu=1500), result))


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_check_fails_on_a_changed_pod(plugin: str) -> None:
    host = new_host()
    result = ok(host, plugin, "ADD", conf(plugin))
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.delete_address(eth0.index, ipaddress.ip_interface("10.44.0.5/24"))
    assert "Failed to match addr 10.44.0.5/24 on interface eth0" in failed(
        host, plugin, "CHECK", with_prev(conf(plugin), result)
    )
    pod.delete_link(eth0.index)
    assert "Container Interface name in prevResult: eth0 not found" in failed(
        host, plugin, "CHECK", with_prev(conf(plugin), result)
    )


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_del_is_idempotent(plugin: str) -> None:
    host = new_host()
    before = picture(host)
    ok(host, plugin, "ADD", conf(plugin))
    ok(host, plugin, "DEL", conf(plugin))
    assert picture(host) == before
    ok(host, plugin, "DEL", conf(plugin))
    host.remove_pod(POD)
    ok(host, plugin, "DEL", conf(plugin))


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_a_failure_at_each_step_leaves_node_and_pod_as_they_were(plugin: str) -> None:
    host = new_host()
    steps = assert_each_step_rolls_back(host, plugin, conf(plugin))
    assert steps[:2] == ["create", "rename"]


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_a_missing_master_is_an_error_that_leaves_nothing(plugin: str) -> None:
    host = new_host()
    before = picture(host)
    assert failed(host, plugin, "ADD", conf(plugin, master="nosuch0")) == (
        'failed to lookup master "nosuch0": Link not found'
    )
    assert picture(host) == before


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_an_mtu_above_the_masters_is_refused(plugin: str) -> None:
    host = new_host()
    assert failed(host, plugin, "ADD", conf(plugin, mtu=9001)) == (
        "invalid MTU 9001, must be [0, master MTU(9000)]"
    )


@pytest.mark.parametrize("plugin", sorted(KINDS))
def test_link_in_container_takes_the_master_from_the_pod(plugin: str) -> None:
    host = new_host()
    pod = host.kernel(POD)
    pod.add_dummy("inner0")
    inner = pod.find_link("inner0")
    assert inner is not None
    pod.set_link(inner.index, up=True)
    ok(host, plugin, "ADD", conf(plugin, master="inner0", linkInContainer=True))
    eth0 = pod.find_link("eth0")
    assert eth0 is not None and eth0.peer_index == inner.index and eth0.peer_netnsid is None


def test_macvlan_without_ipam_is_l2_and_up() -> None:
    host = new_host()
    c = conf("macvlan", mode="private")
    del c["ipam"]
    result = ok(host, "macvlan", "ADD", c)
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.up and eth0.macvlan_mode == 1  # MACVLAN_MODE_PRIVATE
    assert "ips" not in result
    assert picture(host)[POD]["addresses"] == [("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)]


def test_vlan_check_sees_another_vlan_id() -> None:
    host = new_host()
    result = ok(host, "vlan", "ADD", conf("vlan"))
    assert failed(host, "vlan", "CHECK", with_prev(conf("vlan", vlanId=43), result)) == (
        "Error: link eth0 configured VLAN ID is 43, current value is 42"
    )


def hostdev_conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "hostdev-net",
        "type": "host-device",
        "device": "ens3",
        "dataDir": str(tmp_path),
        "ipam": STATIC,
        **extra,
    }


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


@pytest.mark.parametrize("bcqueuelen", [0, 1, 2**32 - 1])
def test_macvlan_asks_the_kernel_for_its_bcqueuelen(bcqueuelen: int) -> None:
    host = new_host()
    ok(host, "macvlan", "ADD", conf("macvlan", bcqueuelen=bcqueuelen))
    (eth0,) = [link for link in host.pods[POD].links.values() if link.name == "eth0"]
    assert eth0.macvlan_bc_queue_len == bcqueuelen


@pytest.mark.parametrize("value", [-1, 2**32, "10", 2.5, True])
def test_macvlan_refuses_a_bcqueuelen_that_is_no_uint32(value: Any) -> None:
    host = new_host()
    before = picture(host)
    msg = failed(host, "macvlan", "ADD", conf("macvlan", bcqueuelen=value))
    assert msg.startswith("invalid config: bcqueuelen must be a number in [0, 4294967295]"), msg
    assert picture(host) == before


@pytest.mark.parametrize("plugin", ["macvlan", "host-device"])
def test_gc_goes_on_to_the_ipam_plugin(plugin: str, tmp_path: Path) -> None:
    """The spec's MUST (v1.9.1 does not): GC reaches the IPAM plugin; no IPAM, no delegate."""
    host = new_host()
    base = hostdev_conf(tmp_path) if plugin == "host-device" else conf(plugin)
    gc = {**base, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}
    ok(host, plugin, "GC", gc)
    assert host.delegations == [("static", "GC")]
    ok(host, plugin, "GC", {k: v for k, v in gc.items() if k != "ipam"})
    assert host.delegations == [("static", "GC")]
