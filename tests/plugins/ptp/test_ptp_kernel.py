"""ptp on real namespaces: traffic between pods through the node, the same kernel state and
result shape as the Go reference, masquerading, idempotent DEL, rollback."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests import harness, node_view
from tests import reference_differences as differences
from tests.harness import Namespace, PluginRun, State, exec_plugin
from tests.references import Reference

pytestmark = pytest.mark.kernel


def ptp_conf(data_dir: Path, version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": version,
        "name": "ptpnet",
        "type": "ptp",
        "ipam": {
            "type": "host-local",
            "dataDir": str(data_dir),
            "ranges": [[{"subnet": "10.95.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}],
        },
        **extra,
    }


def run(
    node: Namespace,
    plugin: Path,
    command: str,
    conf: dict[str, Any],
    cid: str,
    netns: str,
    env: dict[str, str] | None = None,
) -> PluginRun:
    with node.entered():
        return exec_plugin(
            plugin,
            command,
            conf,
            container_id=cid,
            netns=netns,
            cni_path=str(plugin.parent),
            extra_env=env,
        )


def routes(ns: Namespace) -> list[str]:
    out = ns.run("ip", "-4", "route", "show").stdout
    # both implementations add their routes with proto boot (`ip route` prints no "proto")
    return sorted(re.sub(r"veth[0-9a-f]{8}", "VETH", line.strip()) for line in out.splitlines())


def test_pods_reach_each_other_and_the_node(
    node: Namespace, pod_factory: Any, tmp_state: State, plugin_dir: Path
) -> None:
    ptp = plugin_dir / "ptp"
    conf = ptp_conf(tmp_state.data_dir, mtu=1400, dns={"nameservers": ["10.95.0.53"]})
    pods = []
    for cid in ("p1", "p2"):
        pod = pod_factory()
        result = run(node, ptp, "ADD", conf, cid, pod.path).ok().json
        pods.append((cid, pod, result))
    (_c1, pod1, r1), (_c2, pod2, r2) = pods
    ip1 = r1["ips"][0]["address"].split("/")[0]
    ip2 = r2["ips"][0]["address"].split("/")[0]
    assert r1["ips"][0]["interface"] == 1 and r1["ips"][0]["gateway"] == "10.95.0.1"
    assert [i["name"] for i in r1["interfaces"]][1] == "eth0"
    assert r1["interfaces"][0]["name"].startswith("veth")
    assert r1["dns"] == {"nameservers": ["10.95.0.53"]}
    assert pod1.links()["eth0"]["mtu"] == 1400
    assert node.ping(ip1) and node.ping(ip2)
    assert pod1.ping(ip2) and pod2.ping(ip1)
    pod_routes = routes(pod1)
    assert "10.95.0.1 dev eth0 scope link src " + ip1 in pod_routes
    assert f"10.95.0.0/24 via 10.95.0.1 dev eth0 src {ip1}" in pod_routes
    assert "default via 10.95.0.1 dev eth0" in pod_routes
    assert node.run("cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip() == "1"
    for cid, pod, result in pods:
        run(node, ptp, "CHECK", {**conf, "prevResult": result}, cid, pod.path).ok()
    for cid, pod, _r in pods:
        run(node, ptp, "DEL", conf, cid, pod.path).ok()
        run(node, ptp, "DEL", conf, cid, pod.path).ok()  # idempotent
    assert not [n for n in node.links() if n.startswith("veth")]
    assert tmp_state.reservations("ptpnet") == []
    assert not node.ping(ip1, timeout=1)


PTP_CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "dual-mtu": {"mtu": 1400, "_dual": True},
    "ipmasq-iptables": {"ipMasq": True, "ipMasqBackend": "iptables", "_dual": True},
    "ipmasq-nft": {"ipMasq": True, "ipMasqBackend": "nftables"},
}


@pytest.mark.interop
@pytest.mark.parametrize("case", sorted(PTP_CASES))
def test_same_kernel_state_as_go(
    case: str,
    pod_factory: Any,
    tmp_path: Path,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
) -> None:
    """Go's ptp and ours on twin nodes: the result, and what ip/tc/bridge/nft show on the
    node and in the pod after ADD and after DEL (tests/node_view.py)."""
    extra = dict(PTP_CASES[case])
    dual = extra.pop("_dual", False)
    states = []
    views: dict[str, list[dict[str, Any]]] = {}
    for impl, plugin in (("go", go_plugin_dir / "ptp"), ("pycni", plugin_dir / "ptp")):
        node = harness.create_namespace("node")
        try:
            pod = pod_factory()
            node_view.without_dad(node, pod)
            conf = ptp_conf(tmp_path / impl, **extra)
            if dual:
                conf["ipam"]["ranges"].append([{"subnet": "fd95::/64"}])
            result = run(node, plugin, "ADD", conf, "same", pod.path).ok().json
            host = result["interfaces"][0]["name"]
            host_addrs = [a for a in node.addresses(host) if not a.startswith("fe80:")]
            node_routes = [r for r in routes(node) if "10.95.0." in r]
            pod_addrs = [a for a in pod.addresses("eth0") if not a.startswith("fe80:")]
            shape = {
                "ips": result["ips"],
                "routes": result["routes"],
                "interfaces": [sorted(i) for i in result["interfaces"]],
            }
            states.append((shape, routes(pod), pod_addrs, host_addrs, node_routes))
            views[impl] = [{"node": node_view.snapshot(node), "pod": node_view.snapshot(pod)}]
            run(node, plugin, "DEL", conf, "same", pod.path).ok()
            assert not [n for n in node.links() if n.startswith("veth")]
            views[impl].append({"node": node_view.snapshot(node)})
        finally:
            node.delete()
    assert states[0] == states[1]
    nft = extra.get("ipMasqBackend") == "nftables"
    if nft and differences.applies("no-nftables-backend", go_reference):
        (ours_add, ours_del), (go_add, go_del) = views["pycni"], views["go"]
        assert {i["table"]["name"] for i in ours_add["node"]["nft"] if "table" in i} == {
            "cni_plugins_masquerade"
        }
        assert ours_del["node"]["nft"] == []  # the last DEL leaves no table
        assert not [i for i in go_del["node"]["nft"] if "rule" in i]
        for view in (ours_add, ours_del, go_add, go_del):
            view["node"].pop("nft")
    whens = ("after ADD", "after DEL")
    for when, ours, theirs in zip(whens, views["pycni"], views["go"], strict=True):
        node_view.compare(ours, theirs, f"ptp {case} {when}", go_reference)


def masq_rules(node: Namespace) -> str:
    """The masqueraded pod addresses: pycni's set elements (``<ip> comment``) and the
    reference layout's per-address rules (``ip saddr <ip>``)."""
    text = node.run("nft", "list", "table", "inet", "cni_plugins_masquerade", check=False).stdout
    return text.replace("ip saddr == ", "ip saddr ")


def test_ipmasq_added_and_removed_even_when_pod_is_gone(
    node: Namespace, pod_factory: Any, tmp_state: State, plugin_dir: Path
) -> None:
    ptp = plugin_dir / "ptp"
    conf = ptp_conf(tmp_state.data_dir, ipMasq=True, ipMasqBackend="nftables")
    pod = pod_factory()
    result = run(node, ptp, "ADD", conf, "masq", pod.path).ok().json
    ip = result["ips"][0]["address"].split("/")[0]
    assert f"{ip} comment" in masq_rules(node)
    pod.delete()  # the runtime lost the namespace before DEL
    run(node, ptp, "DEL", conf, "masq", pod.path).ok()
    assert ip not in masq_rules(node)
    assert masq_rules(node) == ""  # its last pod gone, the table went too
    assert tmp_state.reservations("ptpnet") == []


@pytest.mark.parametrize("step", ["veth", "container-config", "host-config", "done"])
def test_failed_add_leaves_nothing(
    step: str, node: Namespace, pod_factory: Any, tmp_state: State, plugin_dir: Path
) -> None:
    pod = pod_factory()
    conf = ptp_conf(tmp_state.data_dir, ipMasq=True, ipMasqBackend="nftables")
    r = run(node, plugin_dir / "ptp", "ADD", conf, "rb", pod.path, {"PYCNI_TEST_FAIL_AT": step})
    assert r.code == 1 and step in r.json["msg"]
    assert not [n for n in node.links() if n.startswith("veth")]
    assert "eth0" not in pod.links()
    assert tmp_state.reservations("ptpnet") == []
    assert masq_rules(node) == ""  # the rollback removed the table it made


def test_bad_config(node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path) -> None:
    pod = pod_factory()
    conf = ptp_conf(tmp_path)
    del conf["ipam"]
    r = run(node, plugin_dir / "ptp", "ADD", conf, "bad", pod.path)
    assert r.code == 1 and r.json["code"] == 7 and "ipam" in r.json["msg"]
    r = run(node, plugin_dir / "ptp", "ADD", ptp_conf(tmp_path, mtu="big"), "bad", pod.path)
    assert r.code == 1 and r.json["code"] == 7 and "mtu" in r.json["msg"]
