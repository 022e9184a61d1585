"""The `flannel` meta plugin exec'd through its entry point in a node namespace: it reads
the subnet file, delegates to bridge + host-local, and DEL works from the saved config even
after the subnet file is gone."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = [pytest.mark.kernel]

SUBNET_ENV = (
    "FLANNEL_NETWORK=10.246.0.0/16\n"
    "FLANNEL_SUBNET=10.246.7.1/24\n"
    "FLANNEL_MTU=1400\n"
    "FLANNEL_IPMASQ=true\n"
)


def conf(state: harness.State, subnet_file: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "flnet",
        "type": "flannel",
        "subnetFile": str(subnet_file),
        "dataDir": str(state.root / "flannel"),
        "ipam": {"dataDir": str(state.data_dir)},
        "delegate": {"bridge": "fl0"},
    }


def test_add_check_del_survives_a_vanished_subnet_file(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, cni_path: str
) -> None:
    pod = pod_factory()
    subnet_file = tmp_state.root / "subnet.env"
    subnet_file.write_text(SUBNET_ENV)
    config = conf(tmp_state, subnet_file)
    plugin = Path(cni_path) / "flannel"
    call = {"container_id": "ctr-fl-1", "netns": pod.path, "cni_path": cni_path}
    with node.entered():
        added: dict[str, Any] = harness.exec_plugin(plugin, "ADD", config, **call).ok().json
    ip = added["ips"][0]
    assert ip["address"] == "10.246.7.2/24" and ip["gateway"] == "10.246.7.1"
    assert added["routes"] == [{"dst": "10.246.0.0/16"}]
    assert "10.246.0.0/16 via 10.246.7.1 dev eth0" in pod.run("ip", "route").stdout
    assert "10.246.7.1/24" in node.addresses("fl0")
    assert pod.links()["eth0"]["mtu"] == 1400
    saved = json.loads((tmp_state.root / "flannel" / "ctr-fl-1").read_text())
    assert saved["type"] == "bridge" and saved["isGateway"] is True
    assert saved["ipMasq"] is False  # the agent masquerades (FLANNEL_IPMASQ=true)
    assert saved["ipam"]["ranges"] == [[{"subnet": "10.246.7.0/24"}]]
    assert saved["ipam"]["dataDir"] == str(tmp_state.data_dir)
    assert tmp_state.reservations("flnet") == ["10.246.7.2"]
    with node.entered():
        harness.exec_plugin(plugin, "CHECK", {**config, "prevResult": added}, **call).ok()
    subnet_file.unlink()
    with node.entered():
        harness.exec_plugin(plugin, "DEL", config, **call).ok()
        again = harness.exec_plugin(plugin, "DEL", config, **call)
    assert again.code == 0, again.stdout
    assert tmp_state.reservations("flnet") == []
    assert not (tmp_state.root / "flannel" / "ctr-fl-1").exists()
    assert "eth0" not in pod.links()


def test_add_without_subnet_file_asks_to_try_again(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, cni_path: str
) -> None:
    pod = pod_factory()
    config = conf(tmp_state, tmp_state.root / "missing.env")
    with node.entered():
        run = harness.exec_plugin(
            Path(cni_path) / "flannel", "ADD", config,
            container_id="ctr-fl-2", netns=pod.path, cni_path=cni_path,
        )  # fmt: skip
    assert run.code == 1
    err = run.json
    assert err["code"] == 11
    assert "missing.env" in str(err["msg"]) and "agent" in str(err["msg"])
    assert not (tmp_state.root / "flannel" / "ctr-fl-2").exists()
    assert "eth0" not in pod.links()


def test_bad_subnet_file_is_a_config_error(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, cni_path: str
) -> None:
    pod = pod_factory()
    subnet_file = tmp_state.root / "subnet.env"
    subnet_file.write_text("FLANNEL_NETWORK=10.246.0.0/16\nFLANNEL_MTU=abc\n")
    with node.entered():
        run = harness.exec_plugin(
            Path(cni_path) / "flannel", "ADD", conf(tmp_state, subnet_file),
            container_id="ctr-fl-3", netns=pod.path, cni_path=cni_path,
        )  # fmt: skip
    assert run.code == 1 and run.json["code"] == 7
    assert "FLANNEL_SUBNET" in str(run.json["msg"])


def _status(state: harness.State, subnet_file: Path, cni_path: str) -> harness.PluginRun:
    config = {**conf(state, subnet_file), "cniVersion": "1.1.0"}
    return harness.exec_plugin(Path(cni_path) / "flannel", "STATUS", config, cni_path=cni_path)


def test_status_and_add_wait_for_a_fresh_subnet_file(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, cni_path: str
) -> None:
    """STATUS is 50 until the agent wrote the subnet file (no pod can be here yet), and 51
    once the agent stopped refreshing it (its pods may lose the other nodes: nothing keeps
    the lease and the routes); an ADD on a stale file is 11 and leaves nothing behind."""
    subnet_file = tmp_state.root / "subnet.env"
    missing = _status(tmp_state, subnet_file, cni_path)
    assert missing.code == 1 and missing.json["code"] == 50, missing.stdout
    assert "no subnet file" in str(missing.json["msg"])
    subnet_file.write_text(SUBNET_ENV + "PYCNI_FRESH_FOR=30\n")
    ok = _status(tmp_state, subnet_file, cni_path)
    assert ok.code == 0 and ok.stdout == "", ok.stdout + ok.stderr
    stale = time.time() - 60
    os.utime(subnet_file, (stale, stale))
    late = _status(tmp_state, subnet_file, cni_path)
    assert late.code == 1 and late.json["code"] == 51
    assert "last refreshed" in str(late.json["msg"])
    pod = pod_factory()
    with node.entered():
        run = harness.exec_plugin(
            Path(cni_path) / "flannel", "ADD", conf(tmp_state, subnet_file),
            container_id="ctr-fl-4", netns=pod.path, cni_path=cni_path,
        )  # fmt: skip
    assert run.code == 1 and run.json["code"] == 11, run.stdout
    assert "not ready" in str(run.json["msg"])
    assert not (tmp_state.root / "flannel" / "ctr-fl-4").exists()
    assert "eth0" not in pod.links() and "fl0" not in node.links()
    assert tmp_state.reservations("flnet") == []
