"""tuning on a real pod interface: values read back from the pod, restored on DEL, and the
same results and kernel state as the Go reference plugin on the same configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import node_view
from tests import reference_differences as differences
from tests.harness import Namespace, exec_plugin
from tests.references import Reference

pytestmark = pytest.mark.kernel

GO_DIR = Path("/usr/lib/cni")  # the chain's first link in tests that compare nothing with Go


def bridge_conf(state_dir: Path, version: str = "1.0.0") -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": "tunenet",
        "type": "bridge",
        "bridge": "cnitune0",
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "dataDir": str(state_dir),
            "ranges": [[{"subnet": "10.77.0.0/24"}]],
        },
    }


def add_pod(
    node: Namespace, pod: Namespace, data_dir: Path, cid: str, go_dir: Path = GO_DIR
) -> dict[str, Any]:
    """The first link of the chain: a Go bridge + host-local (``go_dir``'s)."""
    with node.entered():
        run = exec_plugin(
            go_dir / "bridge",
            "ADD",
            bridge_conf(data_dir),
            container_id=cid,
            netns=pod.path,
            cni_path=str(go_dir),
        ).ok()
    return run.json


def del_pod(
    node: Namespace, pod: Namespace, data_dir: Path, cid: str, go_dir: Path = GO_DIR
) -> None:
    with node.entered():
        exec_plugin(
            go_dir / "bridge",
            "DEL",
            bridge_conf(data_dir),
            container_id=cid,
            netns=pod.path,
            cni_path=str(go_dir),
        ).ok()


def tuning_conf(prev: dict[str, Any] | None, backup_dir: Path, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "tunenet",
        "type": "tuning",
        "dataDir": str(backup_dir),
        **extra,
    }
    if prev is not None:
        conf["prevResult"] = prev
    return conf


def run_tuning(
    plugin: Path, node: Namespace, pod: Namespace, command: str, conf: dict[str, Any], cid: str
) -> Any:
    with node.entered():
        return exec_plugin(
            plugin, command, conf, container_id=cid, netns=pod.path, cni_path=str(plugin.parent)
        )


def link_state(pod: Namespace, ifname: str = "eth0") -> dict[str, Any]:
    info = pod.links()[ifname]
    return {
        "mac": info["address"],
        "mtu": info["mtu"],
        "promisc": int(info.get("promiscuity", 0)) > 0,
        "allmulti": "ALLMULTI" in info["flags"],
        "txqlen": info.get("txqlen"),
        "alias": info.get("ifalias", ""),
    }


def sysctl(pod: Namespace, path: str) -> str:
    return pod.run("cat", f"/proc/sys/{path}").stdout.strip()


LINK_CHANGES = {"mac": "c2:b0:57:49:47:f1", "mtu": 1400, "promisc": True, "allmulti": True}
SYSCTLS = {"net.ipv4.conf.IFNAME.arp_ignore": "1", "net.ipv4.conf.IFNAME.arp_announce": "2"}


def test_add_check_del_restores_everything(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = add_pod(node, pod, tmp_path / "ipam", "tune1")
    before = link_state(pod)
    sysctl_before = sysctl(pod, "net/ipv4/conf/eth0/arp_ignore")
    conf = tuning_conf(
        prev,
        tmp_path / "tuning",
        sysctl=SYSCTLS,
        txQLen=321,
        alias="pod eth0",
        **LINK_CHANGES,
    )
    run = run_tuning(plugin_dir / "tuning", node, pod, "ADD", conf, "tune1").ok()
    result = run.json
    eth0 = [i for i in result["interfaces"] if i["name"] == "eth0"]
    assert eth0 and eth0[0]["mac"] == LINK_CHANGES["mac"]
    assert result["ips"] == prev["ips"]
    now = link_state(pod)
    assert now == {**LINK_CHANGES, "txqlen": 321, "alias": "pod eth0"}
    assert sysctl(pod, "net/ipv4/conf/eth0/arp_ignore") == "1"
    assert sysctl(pod, "net/ipv4/conf/eth0/arp_announce") == "2"
    backup = tmp_path / "tuning" / "tune1_eth0.json"
    saved = json.loads(backup.read_text())
    assert saved["mac"] == before["mac"] and saved["mtu"] == before["mtu"]
    assert saved["promisc"] is False and saved["allmulti"] is False
    assert oct(backup.stat().st_mode & 0o777) == "0o600"

    run_tuning(plugin_dir / "tuning", node, pod, "CHECK", conf, "tune1").ok()
    pod.run("ip", "link", "set", "eth0", "mtu", "1450")
    bad = run_tuning(plugin_dir / "tuning", node, pod, "CHECK", conf, "tune1")
    assert bad.code != 0 and "MTU" in bad.json["msg"]

    run_tuning(plugin_dir / "tuning", node, pod, "DEL", conf, "tune1").ok()
    assert link_state(pod) == before
    assert sysctl(pod, "net/ipv4/conf/eth0/arp_ignore") == sysctl_before
    assert not backup.exists()
    # DEL again, and DEL once the pod namespace is gone: still success
    run_tuning(plugin_dir / "tuning", node, pod, "DEL", conf, "tune1").ok()
    del_pod(node, pod, tmp_path / "ipam", "tune1")


@pytest.mark.interop
def test_same_result_and_kernel_state_as_go(
    node: Namespace,
    pod_factory: Any,
    tmp_path: Path,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
) -> None:
    outcomes = []
    views: dict[str, list[dict[str, Any]]] = {}
    for impl, plugin in (("go", go_plugin_dir / "tuning"), ("py", plugin_dir / "tuning")):
        pod = pod_factory()
        cid = f"diff-{impl}"
        prev = add_pod(node, pod, tmp_path / f"ipam-{impl}", cid, go_plugin_dir)
        before = link_state(pod)
        # explicit names: Go's CHECK does not substitute IFNAME (a reference bug)
        keys = {"net.ipv4.conf.eth0.arp_ignore": "1", "net.ipv4.conf.eth0.arp_announce": "2"}
        conf = tuning_conf(prev, tmp_path / f"tuning-{impl}", sysctl=keys, **LINK_CHANGES)
        result = run_tuning(plugin, node, pod, "ADD", conf, cid).ok().json
        after_add = link_state(pod)
        fixed = (str(LINK_CHANGES["mac"]),)
        views[impl] = [node_view.snapshot(pod, fixed)]
        sysctls = [sysctl(pod, "net/ipv4/conf/eth0/arp_ignore")]
        saved = json.loads((tmp_path / f"tuning-{impl}" / f"{cid}_eth0.json").read_text())
        run_tuning(plugin, node, pod, "CHECK", conf, cid).ok()
        run_tuning(plugin, node, pod, "DEL", conf, cid).ok()
        after_del = link_state(pod)
        views[impl].append(node_view.snapshot(pod, fixed))
        for intf in result["interfaces"]:
            if intf["name"] != "eth0":
                intf.pop("mac", None)
            if intf["name"].startswith("veth"):
                intf["name"] = "veth"  # random host-side name
            intf.pop("sandbox", None)
        if result.get("dns") == {} and differences.applies("dns-empty", go_reference):
            del result["dns"]  # the reference prints an empty dns object, pycni leaves it out
        result["ips"] = [{**ip, "address": "x", "gateway": "g"} for ip in result["ips"]]
        outcomes.append(
            (
                result,
                after_add,
                sysctls,
                {k: v for k, v in saved.items() if k not in ("sysctl", "mac")},
                after_del == before,
            )
        )
        del_pod(node, pod, tmp_path / f"ipam-{impl}", cid, go_plugin_dir)
    assert outcomes[0] == outcomes[1]
    # what ip/tc/bridge/nft show in the pod (the Go bridge made both pods' interfaces)
    whens = ("after ADD", "after DEL")
    for when, ours, theirs in zip(whens, views["py"], views["go"], strict=True):
        node_view.compare(ours, theirs, f"tuning {when}", go_reference)
    assert views["py"][0]["link"][1]["address"] == LINK_CHANGES["mac"]


@pytest.mark.interop
def test_go_del_restores_what_pycni_add_changed(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    """The backup file is the reference's: Go's DEL can undo our ADD."""
    pod = pod_factory()
    prev = add_pod(node, pod, tmp_path / "ipam", "cross", go_plugin_dir)
    before = link_state(pod)
    conf = tuning_conf(prev, tmp_path / "tuning", **LINK_CHANGES)
    run_tuning(plugin_dir / "tuning", node, pod, "ADD", conf, "cross").ok()
    assert link_state(pod)["mtu"] == 1400
    run_tuning(go_plugin_dir / "tuning", node, pod, "DEL", conf, "cross").ok()
    assert link_state(pod) == before
    assert not (tmp_path / "tuning" / "cross_eth0.json").exists()
    del_pod(node, pod, tmp_path / "ipam", "cross", go_plugin_dir)


@pytest.mark.parametrize(
    "key",
    [
        "kernel.hostname",
        "net/../kernel/hostname",
        "net.ipv4..ip_forward",
        "net",
        "fs.file-max",
        "net/ipv4/conf/../../../kernel/hostname",
    ],
)
def test_sysctl_outside_net_is_refused_before_any_change(
    key: str, node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = add_pod(node, pod, tmp_path / "ipam", "refuse")
    before = link_state(pod)
    conf = tuning_conf(prev, tmp_path / "tuning", sysctl={key: "1"}, mtu=1300)
    run = run_tuning(plugin_dir / "tuning", node, pod, "ADD", conf, "refuse")
    assert run.code == 1
    err = run.json
    assert err["code"] == 7 and "sysctl" in err["msg"]
    assert link_state(pod) == before
    assert not (tmp_path / "tuning").exists()
    del_pod(node, pod, tmp_path / "ipam", "refuse")


def test_failed_add_rolls_back(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    """An MTU the veth refuses fails ADD after the MAC and sysctl changed: both undone."""
    pod = pod_factory()
    prev = add_pod(node, pod, tmp_path / "ipam", "rollb")
    before = link_state(pod)
    arp_before = sysctl(pod, "net/ipv4/conf/eth0/arp_ignore")
    conf = tuning_conf(
        prev,
        tmp_path / "tuning",
        sysctl={"net.ipv4.conf.eth0.arp_ignore": "2"},
        mac="c2:b0:57:49:47:f2",
        mtu=70000,
    )
    run = run_tuning(plugin_dir / "tuning", node, pod, "ADD", conf, "rollb")
    assert run.code == 1 and "mtu" in run.json["msg"]
    assert link_state(pod) == before
    assert sysctl(pod, "net/ipv4/conf/eth0/arp_ignore") == arp_before
    assert not (tmp_path / "tuning" / "rollb_eth0.json").exists()
    del_pod(node, pod, tmp_path / "ipam", "rollb")


def test_mac_sources_precedence(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    """config < CNI_ARGS MAC < runtimeConfig.mac < args.cni.mac."""
    pod = pod_factory()
    prev = add_pod(node, pod, tmp_path / "ipam", "macs")
    conf = tuning_conf(
        prev,
        tmp_path / "tuning",
        mac="c2:00:00:00:00:01",
        runtimeConfig={"mac": "c2:00:00:00:00:03"},
    )
    with node.entered():
        run = exec_plugin(
            plugin_dir / "tuning",
            "ADD",
            conf,
            container_id="macs",
            netns=pod.path,
            cni_path=str(plugin_dir),
            cni_args="IgnoreUnknown=1;MAC=c2:00:00:00:00:02;K8S_POD_NAME=x",
        ).ok()
    assert link_state(pod)["mac"] == "c2:00:00:00:00:03"
    assert any(i.get("mac") == "c2:00:00:00:00:03" for i in run.json["interfaces"])
    conf["args"] = {"cni": {"mac": "c2:00:00:00:00:04", "mtu": 1280}}
    run_tuning(plugin_dir / "tuning", node, pod, "ADD", conf, "macs").ok()
    assert link_state(pod)["mac"] == "c2:00:00:00:00:04"
    assert link_state(pod)["mtu"] == 1280
    run_tuning(plugin_dir / "tuning", node, pod, "DEL", conf, "macs").ok()
    # the first ADD's originals were kept across the second ADD
    assert link_state(pod)["mac"] == prev_mac(prev)
    del_pod(node, pod, tmp_path / "ipam", "macs")


def prev_mac(prev: dict[str, Any]) -> str:
    return str(next(i["mac"] for i in prev["interfaces"] if i["name"] == "eth0"))


def test_missing_prev_result_and_duplicate_keys(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    pod = pod_factory()
    run = run_tuning(plugin_dir / "tuning", node, pod, "ADD", tuning_conf(None, tmp_path), "noprev")
    assert run.code == 1 and "prevResult" in run.json["msg"]
    raw = (
        b'{"cniVersion":"1.0.0","name":"n","type":"tuning","prevResult":{"cniVersion":"1.0.0"},'
        b'"sysctl":{"net.ipv4.conf.eth0.arp_ignore":"1","net.ipv4.conf.eth0.arp_ignore":"2"}}'
    )
    with node.entered():
        dup = exec_plugin(
            plugin_dir / "tuning", "ADD", raw, container_id="d", netns=pod.path, cni_path="/x"
        )
    assert dup.code == 1 and "duplicated" in dup.json["msg"]
