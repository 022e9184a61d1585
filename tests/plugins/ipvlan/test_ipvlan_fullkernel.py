"""ipvlan on a kernel that has it: each mode against the Go reference 1.1.1 (result, links with
their IFLA_INFO_DATA, addresses, routes, DEL back to the start), pods pinging each other, the
private flag keeping them apart, the chained form and linkInContainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests.fullkernel.vlan_support import assert_same, comparable_result, own_links, run, state
from tests.references import Reference

pytestmark = pytest.mark.kernel

MASTER = "ivm0"


def _master(node: harness.Namespace, default_route: bool = False) -> None:
    """A veth pair in the node; its first end is the master (up, carrier on)."""
    node.run("ip", "link", "add", MASTER, "type", "veth", "peer", "name", "ivp0")
    node.run("ip", "link", "set", MASTER, "up")
    node.run("ip", "link", "set", "ivp0", "up")
    if default_route:
        node.run("ip", "addr", "add", "192.0.2.1/24", "dev", MASTER)
        node.run("ip", "route", "add", "default", "via", "192.0.2.254", "dev", MASTER)


def _conf(address: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "ivnet",
        "type": "ipvlan",
        "master": MASTER,
        "ipam": {
            "type": "static",
            "addresses": [{"address": address, "gateway": "10.73.0.1"}],
            "routes": [{"dst": "10.98.0.0/16"}],
        },
        **extra,
    }
    return {k: v for k, v in conf.items() if v is not None}


@pytest.mark.interop
@pytest.mark.parametrize("mode", ["l2", "l3", "l3s"])
def test_mode_as_go_reference_and_pods_ping_each_other(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
    mode: str,
) -> None:
    # l3s also takes its master from the node's default route, as the reference does
    default_route = mode == "l3s"
    _master(node, default_route)
    before = state(node)
    master = None if default_route else MASTER
    conf = _conf("10.73.0.21/24", mode=mode, master=master)
    other = _conf("10.73.0.22/24", mode=mode, master=master)
    ours, peer, theirs = pod_factory(), pod_factory(), pod_factory()
    ipvlan, go = plugin_dir / "ipvlan", go_plugin_dir / "ipvlan"
    with node.entered():
        mine = run(ipvlan, "ADD", conf, ours, str(plugin_dir)).ok()
        run(ipvlan, "ADD", other, peer, str(plugin_dir), container_id="c2").ok()
        assert ours.ping("10.73.0.22") and peer.ping("10.73.0.21")
        assert ours.links()["eth0"]["txqlen"] == 1000  # the kernel's default (Go 1.1.1: 0)
        seen_ours = (comparable_result(mine.json, {ours.path: "<pod>"}), state(ours), state(node))
        checked = {**conf, "prevResult": mine.json}
        run(ipvlan, "CHECK", checked, ours, str(plugin_dir)).ok()
        run(ipvlan, "DEL", conf, ours, str(plugin_dir)).ok()
        run(ipvlan, "DEL", other, peer, str(plugin_dir), container_id="c2").ok()
        assert own_links(ours) == own_links(peer) == {"lo"}
        assert state(node) == before

        go_run = run(go, "ADD", conf, theirs, str(go_plugin_dir)).ok()
        seen_go = (
            comparable_result(go_run.json, {theirs.path: "<pod>"}),
            state(theirs),
            state(node),
        )
        # our CHECK accepts what the reference set up
        run(ipvlan, "CHECK", {**conf, "prevResult": go_run.json}, theirs, str(plugin_dir)).ok()
        run(go, "DEL", conf, theirs, str(go_plugin_dir)).ok()
        assert own_links(theirs) == {"lo"}
    assert_same(seen_ours, seen_go, go_reference.name)
    eth0 = seen_ours[1]["links"]["eth0"]["linkinfo"]
    assert eth0["info_kind"] == "ipvlan" and eth0["info_data"]["mode"] == mode


def test_private_flag_keeps_pods_on_one_master_apart(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    """``flag: private`` (IFLA_IPVLAN_FLAGS, pycni's key): the slaves of one master do not
    reach each other; with the default (bridge) they do (the test above)."""
    _master(node)
    a, b = pod_factory(), pod_factory()
    conf_a = _conf("10.73.0.41/24", flag="private")
    conf_b = _conf("10.73.0.42/24", flag="private")
    with node.entered():
        run(plugin_dir / "ipvlan", "ADD", conf_a, a, str(plugin_dir)).ok()
        run(plugin_dir / "ipvlan", "ADD", conf_b, b, str(plugin_dir), container_id="c2").ok()
        data = a.links()["eth0"]["linkinfo"]["info_data"]  # type: ignore[index]
        assert "private" in str(data), data
        assert not a.ping("10.73.0.42", timeout=1)
        run(plugin_dir / "ipvlan", "DEL", conf_a, a, str(plugin_dir)).ok()
        run(plugin_dir / "ipvlan", "DEL", conf_b, b, str(plugin_dir), container_id="c2").ok()
    assert own_links(a) == own_links(b) == {"lo"}


@pytest.mark.interop
def test_chained_form_takes_master_and_addresses_from_prev_result(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
) -> None:
    _master(node)
    prev = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": MASTER}],
        "ips": [{"address": "10.73.0.31/24", "gateway": "10.73.0.1"}],
        "routes": [{"dst": "10.97.0.0/16", "gw": "10.73.0.1"}],
    }
    conf = {"cniVersion": "1.0.0", "name": "ivnet", "type": "ipvlan", "prevResult": prev}
    seen = []
    for plugin, path in ((plugin_dir, plugin_dir), (go_plugin_dir, go_plugin_dir)):
        pod = pod_factory()
        with node.entered():
            added = run(plugin / "ipvlan", "ADD", conf, pod, str(path)).ok()
            seen.append((comparable_result(added.json, {pod.path: "<pod>"}), state(pod)))
            run(plugin / "ipvlan", "DEL", conf, pod, str(path)).ok()
        assert own_links(pod) == {"lo"}
    assert_same(seen[0], seen[1], go_reference.name)
    assert seen[0][1]["addresses"]["eth0"] == ["10.73.0.31/24"]


def test_link_in_container_uses_a_master_inside_the_pod(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    """linkInContainer (newer references; 1.1.1 ignores it): the master is looked up, and the
    ipvlan created, in the pod's namespace."""
    pod = pod_factory()
    node.run(
        "ip", "link", "add", "ivo0", "type", "veth", "peer", "name", "inner0", "netns", pod.path
    )
    pod.run("ip", "link", "set", "inner0", "up")
    conf = _conf("10.73.0.51/24", master="inner0", linkInContainer=True, mode="l3")
    with node.entered():
        run(plugin_dir / "ipvlan", "ADD", conf, pod, str(plugin_dir)).ok()
        eth0 = pod.links()["eth0"]
        assert eth0["link"] == "inner0" and "link_netnsid" not in eth0, eth0
        run(plugin_dir / "ipvlan", "DEL", conf, pod, str(plugin_dir)).ok()
    assert own_links(pod) == {"lo", "inner0"}
