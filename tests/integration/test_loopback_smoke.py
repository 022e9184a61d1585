"""The harness end to end: an installed entry point run inside a node namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import harness

pytestmark = pytest.mark.kernel


def test_loopback_add_and_del_through_entry_point(
    node: harness.Namespace, pod_factory: object, plugin_dir: Path
) -> None:
    pod = pod_factory()  # type: ignore[operator]
    pod.run("ip", "link", "set", "lo", "down")
    config = {"cniVersion": "1.0.0", "name": "lo-net", "type": "loopback"}
    with node.entered():
        run = harness.exec_plugin(
            plugin_dir / "loopback",
            "ADD",
            config,
            container_id="c1",
            netns=pod.path,
            cni_path=str(plugin_dir),
        ).ok()
    assert run.json["interfaces"] == [
        {"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": pod.path}
    ]
    assert "UP" in pod.links()["lo"]["flags"]  # type: ignore[operator]
    with node.entered():
        harness.exec_plugin(
            plugin_dir / "loopback",
            "DEL",
            config,
            container_id="c1",
            netns=pod.path,
            cni_path=str(plugin_dir),
        ).ok()
    assert "UP" not in pod.links()["lo"]["flags"]  # type: ignore[operator]
