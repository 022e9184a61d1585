"""The bridge plugin's VLAN path on a kernel with bridge VLAN filtering, against each Go
reference: ``vlan`` (the port's PVID, the gateway on ``<bridge>.<vid>``), ``preserveDefaultVlan``
and ``vlanTrunk`` with and without a native ``vlan`` (which v1.1.1 ignores, so against it only
what tests/reference_differences.py lists for v1.1.1 is taken out): results, links, ``bridge
vlan show``, routes, DEL; pods on different VLANs of one bridge apart; macvlan and host-device on
a VLAN master.

pycni and Go each run in a node namespace of their own, so their bridges compare side by side.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests import reference_differences as differences
from tests.fullkernel.vlan_support import assert_same, comparable_result, own_links, run, state
from tests.references import Reference

pytestmark = pytest.mark.kernel

BRIDGE = "cnivl0"
GW_PORT = f"veth of {BRIDGE} to {BRIDGE}.100"
POD_PORT = f"veth of {BRIDGE} to other netns"
UNTAGGED = ("Egress Untagged",)
PVID_UNTAGGED = ("Egress Untagged", "PVID")


@pytest.fixture
def go_node() -> Iterator[harness.Namespace]:
    ns = harness.create_namespace("gonode")
    try:
        yield ns
    finally:
        ns.delete()


def _conf(data_dir: Path, gateway: bool = True, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "brvnet",
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": gateway,
        # host-veth-ipv6: pycni's ports have no IPv6 unless asked; Go's have (and ignore the key)
        "hostVethIPv6": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.75.0.0/24"}]],
            "dataDir": str(data_dir),
        },
        **extra,
    }
    return conf


def _both(
    node: harness.Namespace,
    go_node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    tmp_path: Path,
    extra: dict[str, Any],
) -> list[dict[str, Any]]:
    """ADD, CHECK and DEL of the same config through pycni (in ``node``) and Go (in
    ``go_node``): each one's result, node and pod state after ADD, node state after DEL."""
    seen = []
    for ns, plugins in ((node, plugin_dir), (go_node, go_plugin_dir)):
        pod = pod_factory()
        conf = _conf(tmp_path / ns.name, **extra)
        with ns.entered():
            added = run(plugins / "bridge", "ADD", conf, pod, str(plugins)).ok()
            after_add = {
                "result": comparable_result(added.json, {pod.path: "<pod>"}),
                "node": state(ns),
                "pod": state(pod),
            }
            checked = {**conf, "prevResult": added.json}
            run(plugin_dir / "bridge", "CHECK", checked, pod, str(plugins)).ok()
            run(plugins / "bridge", "DEL", conf, pod, str(plugins)).ok()
        assert own_links(pod) == {"lo"}
        seen.append({**after_add, "node after DEL": state(ns)})
    return seen


@pytest.mark.interop
def test_vlan_with_preserved_default_vlan_is_the_go_reference(
    node: harness.Namespace,
    go_node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
    tmp_path: Path,
) -> None:
    """``vlan`` as 1.1.1 does it (which never removed the default VLAN, what
    ``preserveDefaultVlan: true`` asks for): the same result (the ``<bridge>.100`` gateway
    listed last), links, port VLANs, routes, and the same node left after DEL."""
    ours, go = _both(
        node,
        go_node,
        pod_factory,
        plugin_dir,
        go_plugin_dir,
        tmp_path,
        {"vlan": 100, "preserveDefaultVlan": True},
    )
    assert_same(ours, go, go_reference.name)
    assert [i["name"] for i in ours["result"]["interfaces"]] == [
        BRIDGE,
        "<gen0>",
        "eth0",
        f"{BRIDGE}.100",
    ]
    vlans = ours["node"]["vlans"]
    assert vlans[f"<{POD_PORT}>"] == [(1, UNTAGGED), (100, PVID_UNTAGGED)]
    assert vlans[f"<{GW_PORT}>"] == [(1, UNTAGGED), (100, PVID_UNTAGGED)]
    assert ours["node"]["addresses"][f"{BRIDGE}.100"] == ["10.75.0.1/24"]
    assert ours["node"]["addresses"][BRIDGE] == []
    assert ours["node"]["links"][BRIDGE]["linkinfo"]["info_data"]["vlan_filtering"] == 1


@pytest.mark.interop
def test_vlan_removes_the_default_vlan_from_the_ports(
    node: harness.Namespace,
    go_node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
    tmp_path: Path,
) -> None:
    """``vlan`` alone, as the reference since 1.8 (and 1.3-1.7 with preserveDefaultVlan
    false): the ports leave VLAN 1, so a pod cannot reach VLAN 1 with tagged frames. v1.9.1
    does the same; v1.1.1 keeps VLAN 1 (``default-vlan-kept``)."""
    ours, go = _both(node, go_node, pod_factory, plugin_dir, go_plugin_dir, tmp_path, {"vlan": 100})
    if differences.applies("default-vlan-kept", go_reference):
        for when in ("node", "node after DEL"):
            for port in (f"<{POD_PORT}>", f"<{GW_PORT}>"):
                if port in go[when]["vlans"]:
                    go[when]["vlans"][port].remove((1, UNTAGGED))
    assert_same(ours, go, go_reference.name)
    assert ours["node"]["vlans"][f"<{POD_PORT}>"] == [(100, PVID_UNTAGGED)]


def test_vlan_trunk_and_native_vlan(
    node: harness.Namespace,
    go_node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
    tmp_path: Path,
) -> None:
    """``vlanTrunk`` (the reference since 1.3; 1.1.1 ignores it and makes no VLAN filtering):
    the trunk's VLANs tagged, VLAN 1 native (PVID, untagged) when no ``vlan`` is given, and
    ``vlan`` as the native VLAN otherwise (since 1.8). A pod on the trunk reaches a pod on
    access VLAN 101 through its own 802.1Q link."""
    trunk = [{"id": 101}, {"minID": 200, "maxID": 202}]
    ours, go = _both(
        node,
        go_node,
        pod_factory,
        plugin_dir,
        go_plugin_dir,
        tmp_path,
        {"vlanTrunk": trunk, "isGateway": False},
    )
    tagged = [(v, ()) for v in (101, 200, 201, 202)]
    assert ours["node"]["vlans"][f"<{POD_PORT}>"] == sorted([(1, PVID_UNTAGGED), *tagged])
    assert ours["node"]["links"][BRIDGE]["linkinfo"]["info_data"]["vlan_filtering"] == 1
    if differences.applies("no-vlan-trunk", go_reference):
        assert go["node"]["links"][BRIDGE]["linkinfo"]["info_data"]["vlan_filtering"] == 0
    else:  # the trunk, then the trunk with a native VLAN, as the reference makes them
        assert_same(ours, go, go_reference.name)
        extra = {"vlanTrunk": trunk, "vlan": 5, "isGateway": False}
        ours, go = _both(node, go_node, pod_factory, plugin_dir, go_plugin_dir, tmp_path, extra)
        assert_same(ours, go, go_reference.name)
        native = ours["node"]["vlans"][f"<{POD_PORT}>"]
        assert native == sorted([(5, PVID_UNTAGGED), *tagged])

    trunk_pod, access_pod = pod_factory(), pod_factory()
    data = tmp_path / "trunk"
    trunk_conf = _conf(data, gateway=False, vlanTrunk=trunk, vlan=5)
    access_conf = _conf(data, gateway=False, vlan=101)
    bridge = plugin_dir / "bridge"
    with node.entered():
        run(bridge, "ADD", trunk_conf, trunk_pod, str(plugin_dir), container_id="t").ok()
        run(bridge, "ADD", access_conf, access_pod, str(plugin_dir), container_id="a").ok()
        ports = state(node)["vlans"]
        assert sorted([(5, PVID_UNTAGGED), *tagged]) in ports.values(), ports
        trunk_pod.run("ip", "link", "add", "link", "eth0", "eth0.101", "type", "vlan", "id", "101")
        trunk_pod.run("ip", "addr", "add", "10.76.1.1/24", "dev", "eth0.101")
        trunk_pod.run("ip", "link", "set", "eth0.101", "up")
        access_pod.run("ip", "addr", "add", "10.76.1.2/24", "dev", "eth0")
        assert trunk_pod.ping("10.76.1.2") and access_pod.ping("10.76.1.1")
        run(bridge, "DEL", trunk_conf, trunk_pod, str(plugin_dir), container_id="t").ok()
        run(bridge, "DEL", access_conf, access_pod, str(plugin_dir), container_id="a").ok()


def test_pods_on_different_vlans_of_one_bridge_do_not_reach_each_other(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, tmp_path: Path
) -> None:
    """Three pods in one subnet: two on VLAN 100 reach each other, the one on VLAN 200 reaches
    neither, not even by tagging its frames with VLAN 1 (the default VLAN is gone)."""
    pods = [pod_factory() for _ in range(3)]
    confs = [_conf(tmp_path, gateway=False, vlan=vid) for vid in (100, 100, 200)]
    with node.entered():
        results = [
            run(plugin_dir / "bridge", "ADD", conf, pod, str(plugin_dir), container_id=f"p{i}")
            .ok()
            .json
            for i, (pod, conf) in enumerate(zip(pods, confs, strict=True))
        ]
        ips = [str(r["ips"][0]["address"]).split("/")[0] for r in results]  # type: ignore[index]
        assert pods[0].ping(ips[1]) and pods[1].ping(ips[0])
        assert not pods[2].ping(ips[0], timeout=1)
        assert not pods[0].ping(ips[2], timeout=1)
        # VLAN-1-tagged frames from the VLAN 200 pod go nowhere
        pods[2].run("ip", "link", "add", "link", "eth0", "eth0.1", "type", "vlan", "id", "1")
        pods[2].run("ip", "addr", "add", "10.76.9.3/24", "dev", "eth0.1")
        pods[2].run("ip", "link", "set", "eth0.1", "up")
        pods[0].run("ip", "addr", "add", "10.76.9.1/24", "dev", "eth0")
        assert not pods[2].ping("10.76.9.1", timeout=1)
        for i, (pod, conf) in enumerate(zip(pods, confs, strict=True)):
            run(plugin_dir / "bridge", "DEL", conf, pod, str(plugin_dir), container_id=f"p{i}").ok()


def test_macvlan_and_host_device_on_a_vlan_master(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    """A macvlan of one VLAN link and another VLAN link moved whole into a pod (host-device),
    on the two ends of a wire, reach each other; DEL gives the device back to the node."""
    node.run("ip", "link", "add", "vw0", "type", "veth", "peer", "name", "vw1")
    for end in ("vw0", "vw1"):
        node.run("ip", "link", "set", end, "up")
        node.run("ip", "link", "add", "link", end, f"{end}.42", "type", "vlan", "id", "42")
        node.run("ip", "link", "set", f"{end}.42", "up")
    before = own_links(node)
    a, b = pod_factory(), pod_factory()

    def static(address: str) -> dict[str, Any]:
        return {"type": "static", "addresses": [{"address": address}]}

    mv = {
        "cniVersion": "1.0.0",
        "name": "onvlan",
        "type": "macvlan",
        "master": "vw0.42",
        "ipam": static("10.77.42.1/24"),
    }
    hd = {
        "cniVersion": "1.0.0",
        "name": "onvlan",
        "type": "host-device",
        "device": "vw1.42",
        "ipam": static("10.77.42.2/24"),
    }
    with node.entered():
        run(plugin_dir / "macvlan", "ADD", mv, a, str(plugin_dir), container_id="mv").ok()
        run(plugin_dir / "host-device", "ADD", hd, b, str(plugin_dir), container_id="hd").ok()
        assert "vw1.42" not in node.links()
        assert b.links()["eth0"]["linkinfo"]["info_kind"] == "vlan"  # type: ignore[index]
        assert a.ping("10.77.42.2") and b.ping("10.77.42.1")
        run(plugin_dir / "macvlan", "DEL", mv, a, str(plugin_dir), container_id="mv").ok()
        run(plugin_dir / "host-device", "DEL", hd, b, str(plugin_dir), container_id="hd").ok()
    assert own_links(node) == before
    assert own_links(a) == own_links(b) == {"lo"}
