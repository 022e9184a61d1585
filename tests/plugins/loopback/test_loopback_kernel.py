"""loopback on the real kernel: result shape, prevResult passthrough, DEL, CHECK, versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = pytest.mark.kernel

ALL_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def _run(
    plugin_dir: Path,
    node: harness.Namespace,
    command: str,
    config: dict[str, Any],
    netns: str,
) -> harness.PluginRun:
    with node.entered():
        return harness.exec_plugin(
            plugin_dir / "loopback",
            command,
            config,
            container_id="lo1",
            netns=netns,
            ifname="eth0",
            cni_path=str(plugin_dir),
            cni_args="none",
        )


def _conf(version: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "lonet", "type": "loopback", **extra}


def _lo_up(pod: harness.Namespace) -> bool:
    return "UP" in pod.links()["lo"]["flags"]


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_add_every_version(
    version: str, plugin_dir: Path, node: harness.Namespace, pod_factory: Any
) -> None:
    pod = pod_factory()
    pod.run("ip", "link", "set", "lo", "down")
    r = _run(plugin_dir, node, "ADD", _conf(version), pod.path).ok()
    data = r.json
    assert _lo_up(pod)
    assert data["cniVersion"] == version
    if version in ("0.1.0", "0.2.0"):
        assert data["ip4"]["ip"] == "127.0.0.1/8"
        assert data["ip6"]["ip"] == "::1/128"
    else:
        assert data["interfaces"] == [
            {"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": pod.path}
        ]
        assert [ip["address"] for ip in data["ips"]] == ["127.0.0.1/8", "::1/128"]
        assert all(ip["interface"] == 0 for ip in data["ips"])


def test_prev_result_passes_through(
    plugin_dir: Path, node: harness.Namespace, pod_factory: Any
) -> None:
    pod = pod_factory()
    prev = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "0a:00:00:00:00:01", "sandbox": pod.path}],
        "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.53"]},
    }
    r = _run(plugin_dir, node, "ADD", _conf("1.0.0", prevResult=prev), pod.path).ok()
    assert r.json == prev


def test_del_sets_lo_down_and_tolerates_a_deleted_netns(
    plugin_dir: Path, node: harness.Namespace, pod_factory: Any
) -> None:
    pod = pod_factory()
    _run(plugin_dir, node, "ADD", _conf("1.0.0"), pod.path).ok()
    _run(plugin_dir, node, "DEL", _conf("1.0.0"), pod.path).ok()
    assert not _lo_up(pod)
    _run(plugin_dir, node, "DEL", _conf("1.0.0"), pod.path).ok()  # again
    _run(plugin_dir, node, "DEL", _conf("1.0.0"), "").ok()  # no netns
    path = pod.path
    pod.delete()
    _run(plugin_dir, node, "DEL", _conf("1.0.0"), path).ok()


def test_check_fails_when_lo_is_down(
    plugin_dir: Path, node: harness.Namespace, pod_factory: Any
) -> None:
    pod = pod_factory()
    r = _run(plugin_dir, node, "ADD", _conf("1.0.0"), pod.path).ok()
    conf = _conf("1.0.0", prevResult=r.json)
    _run(plugin_dir, node, "CHECK", conf, pod.path).ok()
    pod.run("ip", "link", "set", "lo", "down")
    bad = _run(plugin_dir, node, "CHECK", conf, pod.path)
    assert bad.code == 1
    assert bad.json["msg"] == "loopback interface is down"


def test_add_refuses_a_non_loopback_address_on_lo(
    plugin_dir: Path, node: harness.Namespace, pod_factory: Any
) -> None:
    pod = pod_factory()
    pod.run("ip", "addr", "add", "10.9.9.9/32", "dev", "lo")
    bad = _run(plugin_dir, node, "ADD", _conf("1.0.0"), pod.path)
    assert bad.code == 1
    assert "non-loopback address" in str(bad.json["msg"])
