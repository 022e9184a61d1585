"""vlan on a kernel with 802.1Q: the Go reference 1.1.1's result and kernel state (the link's
VLAN id, MTU, queue length, addresses, routes), pods on one VLAN across a wire reaching each
other and a pod on another VLAN not, and linkInContainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests import reference_differences as differences
from tests.fullkernel.vlan_support import assert_same, comparable_result, own_links, run, state
from tests.references import Reference

pytestmark = pytest.mark.kernel

# a wire between two node interfaces: VLAN links on either end see each other's tagged frames
LEFT, RIGHT = "vlw0", "vlw1"


def _wire(node: harness.Namespace) -> None:
    node.run("ip", "link", "add", LEFT, "type", "veth", "peer", "name", RIGHT)
    for name in (LEFT, RIGHT):
        node.run("ip", "link", "set", name, "up")


def _conf(master: str, vlan_id: int, address: str, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "vlnet",
        "type": "vlan",
        "master": master,
        "vlanId": vlan_id,
        "ipam": {
            "type": "static",
            "addresses": [{"address": address}],
            "routes": [{"dst": "10.96.0.0/16", "gw": "10.74.0.1"}],
        },
        **extra,
    }


@pytest.mark.interop
def test_same_result_and_kernel_state_as_go_reference(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
) -> None:
    _wire(node)
    before = state(node)
    conf = _conf(LEFT, 42, "10.74.0.11/24", mtu=1400)
    seen = []
    qlens: list[object] = []
    for plugin, path in ((plugin_dir, plugin_dir), (go_plugin_dir, go_plugin_dir)):
        pod = pod_factory()
        with node.entered():
            added = run(plugin / "vlan", "ADD", conf, pod, str(path)).ok()
            seen.append((comparable_result(added.json, {pod.path: "<pod>"}), state(pod)))
            qlens.append(pod.links()["eth0"].get("txqlen"))
            # our CHECK accepts what either set up
            checked = {**conf, "prevResult": added.json}
            run(plugin_dir / "vlan", "CHECK", checked, pod, str(plugin_dir)).ok()
            run(plugin / "vlan", "DEL", conf, pod, str(path)).ok()
        assert own_links(pod) == {"lo"}
        assert state(node) == before
    assert_same(seen[0], seen[1], go_reference.name)
    eth0 = seen[0][1]["links"]["eth0"]
    assert eth0["linkinfo"]["info_data"]["id"] == 42 and eth0["mtu"] == 1400
    # the kernel's default; Go 1.1.1 sets 0 (txqlen-zero: ip -j omits it)
    go_qlen = None if differences.applies("txqlen-zero", go_reference) else 1000
    assert qlens == [1000, go_qlen]


def test_pods_on_one_vlan_reach_each_other_and_not_across_vlans(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    _wire(node)
    a, b, c = pod_factory(), pod_factory(), pod_factory()
    confs = [
        (a, _conf(LEFT, 42, "10.74.0.21/24"), "ca"),
        (b, _conf(RIGHT, 42, "10.74.0.22/24"), "cb"),
        (c, _conf(RIGHT, 43, "10.74.0.23/24"), "cc"),  # same subnet, other VLAN
    ]
    with node.entered():
        for pod, conf, cid in confs:
            run(plugin_dir / "vlan", "ADD", conf, pod, str(plugin_dir), container_id=cid).ok()
        assert a.ping("10.74.0.22") and b.ping("10.74.0.21")
        assert not a.ping("10.74.0.23", timeout=1)
        # CHECK notices a link whose VLAN id is not the configured one
        wrong = {**confs[2][1], "vlanId": 42, "prevResult": None}
        wrong["prevResult"] = {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": c.path}],
            "ips": [{"address": "10.74.0.23/24", "interface": 0}],
        }
        checked = run(plugin_dir / "vlan", "CHECK", wrong, c, str(plugin_dir), container_id="cc")
        assert checked.code == 1 and "VLAN ID is 42, current value is 43" in checked.stdout
        for pod, conf, cid in confs:
            run(plugin_dir / "vlan", "DEL", conf, pod, str(plugin_dir), container_id=cid).ok()
    for pod in (a, b, c):
        assert own_links(pod) == {"lo"}


def test_link_in_container_uses_a_master_inside_the_pod(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    node.run(
        "ip", "link", "add", "vlo0", "type", "veth", "peer", "name", "inner0", "netns", pod.path
    )
    pod.run("ip", "link", "set", "inner0", "up")
    conf = _conf("inner0", 7, "10.74.0.31/24", linkInContainer=True)
    with node.entered():
        run(plugin_dir / "vlan", "ADD", conf, pod, str(plugin_dir)).ok()
        eth0 = pod.links()["eth0"]
        assert eth0["link"] == "inner0" and eth0["linkinfo"]["info_data"]["id"] == 7  # type: ignore[index]
        run(plugin_dir / "vlan", "DEL", conf, pod, str(plugin_dir)).ok()
    assert own_links(pod) == {"lo", "inner0"}
