"""host-device against the real kernel: a node veth end moved into a pod and back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = pytest.mark.kernel


def _node_link(node: harness.Namespace) -> str:
    """hdA (the device to move, with a node address) paired with hdB (stays on the node)."""
    node.run("ip", "link", "add", "name", "hdA", "type", "veth", "peer", "name", "hdB")
    node.run("ip", "addr", "add", "10.90.0.5/24", "dev", "hdA")
    node.run("ip", "addr", "add", "10.90.0.1/24", "dev", "hdB")
    node.run("ip", "link", "set", "hdA", "up")
    node.run("ip", "link", "set", "hdB", "up")
    return str(node.links()["hdA"]["address"])


def _conf(tmp_state: harness.State, ipam: bool = True, **sel: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "hdnet",
        "type": "host-device",
        "dataDir": str(tmp_state.root / "hostdev"),
        **sel,
    }
    if ipam:
        conf["ipam"] = {
            "type": "static",
            "addresses": [{"address": "10.90.0.2/24"}],
            "routes": [{"dst": "10.91.0.0/16", "gw": "10.90.0.1"}],
        }
    return conf


def _run(
    plugin: Path, command: str, conf: dict[str, Any], pod: harness.Namespace, path: str, **kw: Any
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin,
        command,
        conf,
        container_id="ctr1",
        netns=pod.path,
        ifname="net1",
        cni_path=path,
        **kw,
    )


def _paths(plugin_dir: Path, go_plugin_dir: Path) -> str:
    return f"{plugin_dir}:{go_plugin_dir}"


def test_move_in_carry_traffic_and_move_back_with_name_and_addresses(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    tmp_state: harness.State,
) -> None:
    mac = _node_link(node)
    pod = pod_factory()
    conf = _conf(tmp_state, device="hdA")
    with node.entered():
        out = _run(
            plugin_dir / "host-device", "ADD", conf, pod, _paths(plugin_dir, go_plugin_dir)
        ).ok()
    assert out.json["interfaces"] == [{"name": "net1", "mac": mac, "sandbox": pod.path}]
    assert "hdA" not in node.links()
    link = pod.links()["net1"]
    assert link["address"] == mac and link["ifalias"] == "hdA" and "UP" in link["flags"]
    assert "10.90.0.2/24" in pod.addresses("net1")
    assert node.ping("10.90.0.2")
    with node.entered():
        _run(
            plugin_dir / "host-device",
            "CHECK",
            {**conf, "prevResult": out.json},
            pod,
            _paths(plugin_dir, go_plugin_dir),
        ).ok()
        _run(plugin_dir / "host-device", "DEL", conf, pod, _paths(plugin_dir, go_plugin_dir)).ok()
    assert "net1" not in pod.links()
    back = node.links()["hdA"]
    assert back["address"] == mac and "UP" in back["flags"] and not back.get("ifalias")
    assert "10.90.0.5/24" in node.addresses("hdA")
    assert not list((tmp_state.root / "hostdev").iterdir())
    with node.entered():  # DEL again, and with the pod gone: nothing to do
        _run(plugin_dir / "host-device", "DEL", conf, pod, _paths(plugin_dir, go_plugin_dir)).ok()
        gone = harness.Namespace(pod.name + "-gone")
        _run(plugin_dir / "host-device", "DEL", conf, gone, str(plugin_dir)).ok()


def test_select_by_hwaddr_l2_only(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, tmp_state: harness.State
) -> None:
    mac = _node_link(node)
    pod = pod_factory()
    conf = _conf(tmp_state, ipam=False, hwaddr=mac.upper())
    with node.entered():
        out = _run(plugin_dir / "host-device", "ADD", conf, pod, str(plugin_dir)).ok()
    assert out.json["interfaces"][0]["mac"] == mac  # type: ignore[index]
    assert "ips" not in out.json and "UP" in pod.links()["net1"]["flags"]
    with node.entered():
        _run(plugin_dir / "host-device", "DEL", conf, pod, str(plugin_dir)).ok()
    assert "hdA" in node.links()


@pytest.mark.interop
def test_interchangeable_with_go_reference(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    tmp_state: harness.State,
) -> None:
    """Same result and pod state; each implementation's DEL undoes the other's ADD."""
    _node_link(node)
    path = _paths(plugin_dir, go_plugin_dir)
    conf = _conf(tmp_state, device="hdA")
    seen = []
    for adder, deleter in (("go", "ours"), ("ours", "go")):
        pod = pod_factory()
        plugins = {"ours": plugin_dir / "host-device", "go": go_plugin_dir / "host-device"}
        with node.entered():
            out = _run(plugins[adder], "ADD", conf, pod, path).ok().json
            link = pod.links()["net1"]
            state = (
                link["address"],
                link["ifalias"],
                link["mtu"],
                "UP" in link["flags"],
                pod.addresses("net1"),
                pod.json("ip", "-j", "route"),
            )
            _run(plugins[deleter], "DEL", conf, pod, path).ok()
        assert "net1" not in pod.links() and "hdA" in node.links()
        out["interfaces"][0]["sandbox"] = "<pod>"  # type: ignore[index]
        out.pop("dns", None)
        seen.append((out, state))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("step", ["save", "move", "up", "ipam", "configure"])
def test_failed_add_gives_the_link_back(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    tmp_state: harness.State,
    step: str,
) -> None:
    mac = _node_link(node)
    pod = pod_factory()
    with node.entered():
        run = _run(
            plugin_dir / "host-device",
            "ADD",
            _conf(tmp_state, device="hdA"),
            pod,
            _paths(plugin_dir, go_plugin_dir),
            extra_env={"PYCNI_TEST_FAIL_AT": step},
        )
    assert run.code == 1 and step in run.json["msg"]  # type: ignore[operator]
    assert set(pod.links()) == {"lo"}
    back = node.links()["hdA"]
    assert back["address"] == mac and "UP" in back["flags"] and not back.get("ifalias")
    assert "10.90.0.5/24" in node.addresses("hdA")


@pytest.mark.parametrize(
    ("sel", "code", "words"),
    [
        ({}, 7, 'specify either "device"'),
        ({"kernelpath": "relative/path"}, 7, "must be absolute"),
        ({"hwaddr": "nonsense"}, 7, "failed to parse MAC"),
        ({"device": "nosuch0"}, 999, "failed to find host device"),
        ({"kernelpath": "/sys/devices/nonexistent"}, 999, "failed to find physical interface"),
        ({"device": 5}, 7, "device must be a string"),
    ],
)
def test_bad_config_is_a_cni_error(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    tmp_state: harness.State,
    sel: dict[str, Any],
    code: int,
    words: str,
) -> None:
    pod = pod_factory()
    with node.entered():
        run = _run(
            plugin_dir / "host-device",
            "ADD",
            _conf(tmp_state, ipam=False, **sel),
            pod,
            str(plugin_dir),
        )
    body = json.loads(run.stdout)
    assert run.code == 1 and body["code"] == code and words in body["msg"], body
