"""ipvlan and vlan on any kernel: config errors before anything is created, and a kernel
without the link type (this machine's) refused cleanly: the IPAM reservation is released and
nothing is left in the node or the pod. Traffic and the comparison with the Go reference run
in the full-kernel lane (tests/plugins/ipvlan/test_ipvlan_fullkernel.py,
tests/plugins/vlan/test_vlan_fullkernel.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = pytest.mark.kernel

MASTER = "ivmaster0"


def _master(node: harness.Namespace) -> None:
    node.run("ip", "link", "add", MASTER, "type", "veth", "peer", "name", "ivpeer0")
    node.run("ip", "link", "set", MASTER, "up")


def _conf(plugin: str, state: harness.State, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "ivnet",
        "type": plugin,
        "master": MASTER,
        "ipam": {"type": "host-local", "subnet": "10.72.0.0/24", "dataDir": str(state.data_dir)},
    }
    if plugin == "vlan":
        conf["vlanId"] = 42
    conf.update(extra)
    return {k: v for k, v in conf.items() if v is not None}


def _kernel_has(kind: str) -> bool:
    args = {"ipvlan": ("type", "ipvlan", "mode", "l2"), "vlan": ("type", "vlan", "id", "5")}[kind]
    probe = (
        f"ip link add pv0 type veth peer name pv1 && ip link add link pv0 name pv2 {' '.join(args)}"
    )
    return subprocess.run(["unshare", "--net", "sh", "-c", probe], check=False).returncode == 0


@pytest.mark.parametrize(
    ("plugin", "extra", "code", "words"),
    [
        ("ipvlan", {"mode": "l4"}, 7, "unknown ipvlan mode: 'l4'; use l2, l3 or l3s"),
        ("ipvlan", {"mode": "L2"}, 7, "unknown ipvlan mode"),
        ("ipvlan", {"flag": "passthru"}, 7, "unknown ipvlan flag"),
        ("ipvlan", {"mtu": 9000}, 7, "invalid MTU 9000, must be [0, master MTU(1500)]"),
        ("ipvlan", {"mtu": 10}, 7, "mtu"),
        ("ipvlan", {"master": "nosuchlink"}, 999, 'failed to lookup master "nosuchlink"'),
        ("ipvlan", {"master": "a/b"}, 7, "master"),
        (
            "ipvlan",
            {"master": None, "ipam": None, "prevResult": {"cniVersion": "1.0.0"}},
            7,
            "chained master failure",
        ),
        ("vlan", {"master": None}, 7, '"master" field is required'),
        ("vlan", {"vlanId": 4095}, 7, "invalid VLAN ID 4095"),
        ("vlan", {"vlanId": -1}, 7, "invalid VLAN ID -1"),
        ("vlan", {"mtu": 1501}, 7, "invalid MTU 1501, must be [0, master MTU(1500)]"),
        ("vlan", {"master": "nosuchlink"}, 999, 'failed to lookup master "nosuchlink"'),
        ("vlan", {"ipam": None}, 7, "ipam.type is required"),
    ],
)
def test_bad_config_is_a_cni_error_and_creates_nothing(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    tmp_state: harness.State,
    plugin: str,
    extra: dict[str, Any],
    code: int,
    words: str,
) -> None:
    _master(node)
    pod = pod_factory()
    before = (node.links(), pod.links())
    with node.entered():
        run = harness.exec_plugin(
            plugin_dir / plugin,
            "ADD",
            _conf(plugin, tmp_state, **extra),
            container_id="c1",
            netns=pod.path,
            cni_path=str(plugin_dir),
        )
    assert run.code == 1, run.stdout
    assert run.json["code"] == code and words in str(run.json["msg"]), run.json
    assert (node.links(), pod.links()) == before
    assert tmp_state.reservations("ivnet") == []


@pytest.mark.parametrize("plugin", ["ipvlan", "vlan"])
def test_a_kernel_without_the_link_type_is_refused_cleanly(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    tmp_state: harness.State,
    plugin: str,
) -> None:
    """Here (no ipvlan, no 8021q) ADD names the missing module and rolls back; on a kernel
    with it, ADD succeeds and DEL leaves the pod as it was."""
    _master(node)
    pod = pod_factory()
    before = (node.links(), pod.links())
    conf = _conf(plugin, tmp_state)
    with node.entered():
        run = harness.exec_plugin(
            plugin_dir / plugin,
            "ADD",
            conf,
            container_id="c1",
            netns=pod.path,
            cni_path=str(plugin_dir),
        )
        if _kernel_has(plugin):
            run.ok()
            assert pod.links()["eth0"]["linkinfo"]["info_kind"] == plugin  # type: ignore[index]
            harness.exec_plugin(
                plugin_dir / plugin,
                "DEL",
                conf,
                container_id="c1",
                netns=pod.path,
                cni_path=str(plugin_dir),
            ).ok()
        else:
            module = {"ipvlan": "module ipvlan", "vlan": "module 8021q"}[plugin]
            assert run.code == 1 and run.json["code"] == 999, run.stdout
            assert f"failed to create {plugin}" in str(run.json["msg"])
            assert module in str(run.json["msg"])
    assert (node.links(), pod.links()) == before
    assert tmp_state.reservations("ivnet") == []
