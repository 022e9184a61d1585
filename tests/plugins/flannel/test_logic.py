"""flannel ADD/CHECK/DEL on the fake host: no root, no netns.

flannel reads the node's subnet file (written by the cluster agent; here a file in a tmp dir),
saves the delegate config it builds in its dataDir (the host's FakeStateFiles) and delegates to
bridge, which the fake host runs in-process on the same FakeKernels and FakeNftables, with
host-local in the same fake state. The delegate masquerades (ipMasq) when the agent does not
(FLANNEL_IPMASQ=false), as flannel's CNI plugin does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    CONTAINER_ID,
    POD,
    call,
    failed,
    ok,
    picture,
    recording_steps,
    with_prev,
)

DATA_DIR = "/var/lib/cni/flannel"
SUBNET_ENV = (
    "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n"
    "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"
)


@pytest.fixture
def subnet_file(tmp_path: Path) -> str:
    path = tmp_path / "subnet.env"
    path.write_text(SUBNET_ENV)
    return str(path)


def conf(subnet_file: str, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "cluster",
        "type": "flannel",
        "subnetFile": subnet_file,
        "dataDir": DATA_DIR,
        **extra,
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


def test_add_saves_the_delegate_config_and_the_bridge_pod_gets_the_nodes_subnet(
    subnet_file: str,
) -> None:
    host = new_host()
    result = ok(host, "flannel", "ADD", conf(subnet_file))
    assert [ip["address"] for ip in result["ips"]] == ["10.244.3.2/24"]
    saved = json.loads(host.files.read(f"{DATA_DIR}/{CONTAINER_ID}"))
    assert saved["type"] == "bridge" and saved["mtu"] == 1450 and saved["ipMasq"] is True
    pod = host.kernel(POD)
    eth0 = pod.find_link("eth0")
    assert eth0 is not None and eth0.mtu == 1450
    assert host.kernel().find_link("cni0") is not None  # the delegate's bridge on the node
    assert picture(host)["node"]["netfilter"], "ipMasq left no masquerade rules"
    ok(host, "flannel", "CHECK", with_prev(conf(subnet_file), result))


def test_del_runs_the_saved_delegate_and_forgets_it(subnet_file: str) -> None:
    host = new_host()
    before = picture(host)
    ok(host, "flannel", "ADD", conf(subnet_file))
    ok(host, "flannel", "DEL", conf(subnet_file))
    assert f"{DATA_DIR}/{CONTAINER_ID}" not in host.files.tree()
    assert host.kernel(POD).find_link("eth0") is None
    after = picture(host)
    assert after["node"]["netfilter"] == before["node"]["netfilter"]
    ok(host, "flannel", "DEL", conf(subnet_file))  # again: nothing saved, nothing to do


def test_check_without_a_saved_config_fails(subnet_file: str) -> None:
    host = new_host()
    assert "no saved delegate config" in failed(host, "flannel", "CHECK", conf(subnet_file))


def test_a_missing_subnet_file_fails_the_add_and_leaves_nothing(tmp_path: Path) -> None:
    host = new_host()
    before = picture(host)
    message = failed(host, "flannel", "ADD", conf(str(tmp_path / "absent.env")))
    assert "absent.env" in message
    assert picture(host) == before


def without_cursor(view: dict[str, Any]) -> dict[str, Any]:
    """A picture less host-local's allocation cursor (``last_reserved_ip.N``): the reference
    moves it on every reservation and never moves it back, so a rolled-back ADD leaves it on."""
    files = {p: v for p, v in view["files"].items() if "/last_reserved_ip." not in p}
    return {**view, "files": files}


def test_a_failure_at_each_step_of_the_delegate_leaves_node_pod_and_files_as_they_were(
    subnet_file: str,
) -> None:
    host = new_host()
    with recording_steps() as steps:
        ok(host, "flannel", "ADD", conf(subnet_file))
    ok(host, "flannel", "DEL", conf(subnet_file))
    assert "ipmasq" in steps and "post-ipam" in steps, steps
    before = without_cursor(picture(host))
    for step in steps:
        code, reply = call(host, "flannel", "ADD", conf(subnet_file), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert "rollback incomplete" not in str(reply.get("details", "")), reply
        assert without_cursor(picture(host)) == before, step
