"""firewall on real namespaces: the same iptables rules as the Go reference, traffic accepted
and dropped where that is the point, the nftables backend, GC, and refusals."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests import reference_differences as differences
from tests.harness import Namespace, exec_plugin
from tests.references import Reference

pytestmark = pytest.mark.kernel

GO_DIR = Path("/usr/lib/cni")  # the chain's bridge in tests that compare nothing with Go


def bridge_conf(
    net: str, bridge: str, subnet: str, data_dir: Path, v6: str = "", version: str = "1.0.0"
) -> dict[str, Any]:
    ranges = [[{"subnet": subnet}]] + ([[{"subnet": v6}]] if v6 else [])
    routes = [{"dst": "0.0.0.0/0"}] + ([{"dst": "::/0"}] if v6 else [])
    return {
        "cniVersion": version,
        "name": net,
        "type": "bridge",
        "bridge": bridge,
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "dataDir": str(data_dir),
            "ranges": ranges,
            "routes": routes,
        },
    }


_RECORDS: list[str] = []  # this test's firewall records dir (see records_dir)


@pytest.fixture(autouse=True)
def records_dir(tmp_path: Path) -> Iterator[None]:
    """Each test keeps the firewall's records under its own tmp dir: the default,
    /run/pycni/firewall/NET/CID_IF, is shared by every run on the machine, and these tests
    use fixed network and container names."""
    _RECORDS[:] = [str(tmp_path / "firewall-records")]
    yield
    _RECORDS.clear()


def fw_conf(
    net: str, prev: dict[str, Any] | None, version: str = "1.0.0", **extra: Any
) -> dict[str, Any]:
    extra.setdefault("dataDir", _RECORDS[0])
    conf: dict[str, Any] = {"cniVersion": version, "name": net, "type": "firewall", **extra}
    if prev is not None:
        conf["prevResult"] = prev
    return conf


def run(
    node: Namespace,
    plugin: Path,
    command: str,
    conf: dict[str, Any],
    cid: str,
    netns: str,
    go_dir: Path = GO_DIR,
) -> harness.PluginRun:
    with node.entered():
        return exec_plugin(
            plugin, command, conf, container_id=cid, netns=netns, cni_path=str(go_dir)
        )


def bridge(
    node: Namespace,
    command: str,
    conf: dict[str, Any],
    cid: str,
    pod: Namespace,
    go_dir: Path = GO_DIR,
) -> Any:
    """The first link of the chain: a Go bridge (``go_dir``'s)."""
    out = run(node, go_dir / "bridge", command, conf, cid, pod.path, go_dir).ok()
    return out.json if command == "ADD" else None


def filter_rules(node: Namespace, family: int = 4) -> list[str]:
    tool = "iptables-save" if family == 4 else "ip6tables-save"
    text = node.run(tool, "-t", "filter").stdout
    return [
        re.sub(r"\[\d+:\d+\]", "", line)
        for line in text.splitlines()
        if line and not line.startswith("#")
    ]


def pod_ip(result: dict[str, Any], family: int = 4) -> str:
    for ip in result["ips"]:
        addr = ip["address"].split("/")[0]
        if (":" in addr) == (family == 6):
            return str(addr)
    raise AssertionError("no address of that family")


@pytest.fixture
def second_node() -> Iterator[Namespace]:
    ns = harness.create_namespace("node")
    try:
        yield ns
    finally:
        ns.delete()


SHARED = "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)"
V1_1_1 = "CNI firewall plugin rules (ingressPolicy: same-bridge)"


@pytest.mark.interop
@pytest.mark.parametrize("policy", ["same-bridge", "isolated"])
def test_iptables_rules_identical_to_go(
    policy: str,
    node: Namespace,
    second_node: Namespace,
    pod_factory: Any,
    tmp_path: Path,
    plugin_dir: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
) -> None:
    """Same dual-stack config through Go and pycni on two nodes: same filter table after
    ADD, after a second pod, and after DEL; each CHECK passes on the other's rules."""
    if policy == "isolated" and go_reference.name == "v1.1.1":
        pytest.skip("Go plugins v1.1.1 have no isolated ingressPolicy")
    states = []
    for impl, node_ns, plugin in (
        ("go", node, go_plugin_dir / "firewall"),
        ("py", second_node, plugin_dir / "firewall"),
    ):
        seen = []
        pods = []
        for n in (1, 2):
            pod = pod_factory()
            bconf = bridge_conf(
                "fwdiff", "cnifwd0", "10.80.0.0/24", tmp_path / impl, v6="fd80::/64"
            )
            prev = bridge(node_ns, "ADD", bconf, f"c{n}", pod, go_plugin_dir)
            conf = fw_conf("fwdiff", prev, backend="iptables", ingressPolicy=policy)
            run(node_ns, plugin, "ADD", conf, f"c{n}", pod.path).ok()
            pods.append((pod, bconf, conf, f"c{n}"))
        seen.append(filter_rules(node_ns, 4) + filter_rules(node_ns, 6))
        other = plugin_dir / "firewall" if impl == "go" else go_plugin_dir / "firewall"
        for pod, _b, conf, cid in pods:
            run(node_ns, plugin, "CHECK", conf, cid, pod.path).ok()
            run(node_ns, other, "CHECK", conf, cid, pod.path).ok()
        pod, bconf, conf, cid = pods[0]
        run(node_ns, plugin, "DEL", conf, cid, pod.path).ok()
        seen.append(filter_rules(node_ns, 4) + filter_rules(node_ns, 6))
        run(node_ns, plugin, "DEL", conf, cid, pod.path).ok()  # idempotent
        pod, bconf, conf, cid = pods[1]
        run(node_ns, plugin, "DEL", conf, cid, pod.path).ok()  # nothing of it stays behind
        for pod, bconf, _conf, cid in pods:
            bridge(node_ns, "DEL", bconf, cid, pod, go_plugin_dir)
        states.append(seen)
    go, py = states
    if differences.applies("firewall-isolation-comments", go_reference):
        py = [[line.replace(SHARED, V1_1_1) for line in seen] for seen in py]
    assert any("-d 10.80.0.2/32" in line for line in go[0])
    assert any("fd80::2/128" in line for line in go[0])
    assert go == py


def node_gateway(result: dict[str, Any]) -> str:
    return str(result["ips"][0]["gateway"])


def forward_drop(node: Namespace) -> None:
    node.run("iptables", "-P", "FORWARD", "DROP")


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
def test_same_bridge_isolation_by_traffic(
    backend: str, node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    """Pods of one bridge reach each other and are reachable from the node; a pod of another
    isolated bridge is dropped."""
    fw = plugin_dir / "firewall"
    nets = {
        "a": bridge_conf("fwisoa", "cniisoa", "10.82.0.0/24", tmp_path),
        "b": bridge_conf("fwisob", "cniisob", "10.83.0.0/24", tmp_path),
    }
    pods: dict[str, tuple[Namespace, dict[str, Any], dict[str, Any]]] = {}
    for name, net in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        pod = pod_factory()
        prev = bridge(node, "ADD", nets[net], name, pod)
        conf = fw_conf(nets[net]["name"], prev, backend=backend, ingressPolicy="same-bridge")
        pods[name] = (pod, prev, conf)
    assert pods["a1"][0].ping(pod_ip(pods["b1"][1])), "routed between bridges before firewall"
    for name, (pod, _prev, conf) in pods.items():
        run(node, fw, "ADD", conf, name, pod.path).ok()
        run(node, fw, "CHECK", conf, name, pod.path).ok()
    a1, b1 = pods["a1"][0], pods["b1"][0]
    ip = {n: pod_ip(pods[n][1]) for n in pods}
    assert a1.ping(ip["a2"]), "same bridge must stay open"
    assert b1.ping(node_gateway(pods["a1"][1])), "the node itself stays reachable"
    assert node.ping(ip["b1"]), "the node must reach pods"
    assert not a1.ping(ip["b1"], timeout=1), "another isolated bridge must be dropped"
    assert not b1.ping(ip["a2"], timeout=1)
    for name, (pod, _prev, conf) in pods.items():
        run(node, fw, "DEL", conf, name, pod.path).ok()
        bridge(node, "DEL", nets[name[0]], name, pod)


def test_rules_accept_pod_traffic_under_drop_policy(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    """With the node's FORWARD policy at DROP, pods on two bridges talk only once firewall
    ADD ran for both, and stop again after DEL (the reference's iptables accept rules)."""
    backend = "iptables"
    fw = plugin_dir / "firewall"
    confs = {}
    for name, subnet in (("x", "10.84.0.0/24"), ("y", "10.85.0.0/24")):
        pod = pod_factory()
        bconf = bridge_conf(f"fwdrop{name}", f"cnidrop{name}", subnet, tmp_path)
        prev = bridge(node, "ADD", bconf, name, pod)
        confs[name] = (pod, bconf, prev, fw_conf(bconf["name"], prev, backend=backend))
    forward_drop(node)
    x = confs["x"][0]
    y_ip = pod_ip(confs["y"][2])
    assert not x.ping(y_ip, timeout=1)
    for name, (pod, _b, _p, conf) in confs.items():
        run(node, fw, "ADD", conf, name, pod.path).ok()
    assert x.ping(y_ip)
    for name, (pod, _b, _p, conf) in confs.items():
        run(node, fw, "DEL", conf, name, pod.path).ok()
    assert not x.ping(y_ip, timeout=1)
    for name, (pod, bconf, _p, _c) in confs.items():
        bridge(node, "DEL", bconf, name, pod)


def nft_pod_elements(node: Namespace, network: str = "fwnft") -> list[str]:
    """``ADDRESS comment "…"`` of every element of the network's address sets."""
    from pycni.plugins.meta.firewall.nft_backend import net_names

    out = []
    for name in net_names(network)[1].values():
        proc = node.run("nft", "-j", "list", "set", "inet", "pycni_firewall", name, check=False)
        if proc.returncode != 0:
            continue
        for item in json.loads(proc.stdout)["nftables"]:
            for elem in item.get("set", {}).get("elem", []):
                inner = elem["elem"]
                out.append(f'{inner["val"]} comment "{inner.get("comment", "")}"')
    return out


def nft_chain_rule_counts(node: Namespace) -> dict[str, int]:
    data = json.loads(node.run("nft", "-j", "list", "table", "inet", "pycni_firewall").stdout)
    counts: dict[str, int] = {}
    for item in data["nftables"]:
        if "rule" in item:
            counts[item["rule"]["chain"]] = counts.get(item["rule"]["chain"], 0) + 1
    return counts


def test_nftables_add_del_gc(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    fw = plugin_dir / "firewall"
    bconf = bridge_conf(
        "fwnft", "cninft0", "10.86.0.0/24", tmp_path, v6="fd86::/64", version="1.1.0"
    )
    pods = {}
    for cid in ("n1", "n2", "n3"):
        pod = pod_factory()
        prev = bridge(node, "ADD", {**bconf, "cniVersion": "1.0.0"}, cid, pod)
        conf = fw_conf("fwnft", prev, version="1.1.0", backend="nftables")
        run(node, fw, "ADD", conf, cid, pod.path).ok()
        run(node, fw, "ADD", conf, cid, pod.path).ok()  # repeated ADD: no duplicates
        pods[cid] = (pod, conf)
    assert len(nft_pod_elements(node)) == 3 * 2  # one element per pod address
    assert any(r.startswith("fd86::2 ") for r in nft_pod_elements(node))
    counts = nft_chain_rule_counts(node)
    assert counts["pods"] == 1  # a jump to the network's chain: constant as pods grow
    assert sorted(counts.values()) == [1, 3, 4]  # pods, forward, the network's 4 set rules
    run(node, fw, "DEL", pods["n1"][1], "n1", pods["n1"][0].path).ok()
    assert len(nft_pod_elements(node)) == 2 * 2
    assert not any("id: n1" in r for r in nft_pod_elements(node))
    bad = run(node, fw, "CHECK", pods["n1"][1], "n1", pods["n1"][0].path)
    assert bad.code == 1
    gc = fw_conf(
        "fwnft",
        None,
        version="1.1.0",
        backend="nftables",
        **{"cni.dev/valid-attachments": [{"containerID": "n2", "ifname": "eth0"}]},
    )
    with node.entered():
        exec_plugin(fw, "GC", gc, cni_path=str(GO_DIR)).ok()
    left = nft_pod_elements(node)
    assert len(left) == 2 and all("id: n2" in r for r in left)
    # DEL without prevResult still finds the rules by their comment
    run(node, fw, "DEL", fw_conf("fwnft", None, backend="nftables"), "n2", pods["n2"][0].path).ok()
    assert nft_pod_elements(node) == []
    for cid, (pod, _c) in pods.items():
        bridge(node, "DEL", {**bconf, "cniVersion": "1.0.0"}, cid, pod)


def test_iptables_gc_uses_records(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    fw = plugin_dir / "firewall"
    bconf = bridge_conf("fwgc", "cnigc0", "10.87.0.0/24", tmp_path)
    records = tmp_path / "records"
    ips = {}
    pods = {}
    for cid in ("g1", "g2"):
        pod = pod_factory()
        prev = bridge(node, "ADD", bconf, cid, pod)
        conf = fw_conf("fwgc", prev, version="1.1.0", backend="iptables", dataDir=str(records))
        run(node, fw, "ADD", conf, cid, pod.path).ok()
        ips[cid] = pod_ip(prev)
        pods[cid] = pod
    gc = fw_conf(
        "fwgc",
        None,
        version="1.1.0",
        backend="iptables",
        dataDir=str(records),
        **{"cni.dev/valid-attachments": [{"containerID": "g2", "ifname": "eth0"}]},
    )
    with node.entered():
        exec_plugin(fw, "GC", gc, cni_path=str(GO_DIR)).ok()
    rules = "\n".join(filter_rules(node))
    assert f"-s {ips['g1']}/32" not in rules
    assert f"-s {ips['g2']}/32" in rules
    assert sorted(p.name for p in (records / "fwgc").iterdir()) == ["g2_eth0"]
    # DEL without prevResult uses the record
    run(node, fw, "DEL", fw_conf("fwgc", None, dataDir=str(records)), "g2", pods["g2"].path).ok()
    assert f"-s {ips['g2']}/32" not in "\n".join(filter_rules(node))
    assert not (records / "fwgc").exists()
    for cid, pod in pods.items():
        bridge(node, "DEL", bconf, cid, pod)


def test_podman_conflist_form(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    """What `podman network create` writes: cniVersion 0.4.0, "backend": "" (iptables here)."""
    pod = pod_factory()
    bconf = bridge_conf("podman1", "cni-podman1", "10.89.0.0/24", tmp_path, version="0.4.0")
    prev = bridge(node, "ADD", bconf, "pm", pod)
    conf = fw_conf("podman1", prev, version="0.4.0", backend="")
    out = run(node, plugin_dir / "firewall", "ADD", conf, "pm", pod.path).ok().json
    assert out["cniVersion"] == "0.4.0" and out["ips"][0]["version"] == "4"
    assert "-A CNI-FORWARD -s 10.89.0.2/32 -j ACCEPT" in filter_rules(node)
    run(node, go_plugin_dir / "firewall", "CHECK", conf, "pm", pod.path, go_plugin_dir).ok()
    run(node, plugin_dir / "firewall", "DEL", conf, "pm", pod.path).ok()
    assert "-A CNI-FORWARD -s 10.89.0.2/32 -j ACCEPT" not in filter_rules(node)
    bridge(node, "DEL", bconf, "pm", pod)


def test_refusals(node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path) -> None:
    pod = pod_factory()
    fw = plugin_dir / "firewall"
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.90.0.2/24"}]}
    r = run(node, fw, "ADD", fw_conf("n", prev, backend="firewalld"), "r", pod.path)
    assert r.code == 1 and r.json["code"] == 2 and "firewalld" in r.json["msg"]
    run(node, fw, "DEL", fw_conf("n", prev, backend="firewalld"), "r", pod.path).ok()
    r = run(node, fw, "ADD", fw_conf("n", None), "r", pod.path)
    assert r.code == 1 and "prevResult" in r.json["msg"]
    r = run(node, fw, "ADD", fw_conf("n", prev, backend="ebtables"), "r", pod.path)
    assert r.code == 1 and r.json["code"] == 7
    r = run(node, fw, "ADD", fw_conf("n", prev, ingressPolicy="same-bridge"), "r", pod.path)
    assert r.code == 1 and "bridge" in r.json["msg"]
    r = run(node, fw, "ADD", fw_conf("n", prev, version="0.3.1"), "r", pod.path)
    assert r.code == 1 and r.json["code"] == 1
    # nothing was left behind by the refused calls
    assert not any(line.startswith("-A CNI-FORWARD") for line in filter_rules(node))


def test_failed_add_rolls_back(
    node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    """A failure after the IPv4 rules (injected at the IPv6 step) removes them again."""
    pod = pod_factory()
    prev = {
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.91.0.2/24"}, {"address": "fd91::2/64"}],
    }
    with node.entered():
        r = exec_plugin(
            plugin_dir / "firewall",
            "ADD",
            fw_conf("rb", prev, backend="iptables", dataDir=str(tmp_path)),
            container_id="rb",
            netns=pod.path,
            cni_path=str(GO_DIR),
            extra_env={"PYCNI_TEST_FAIL_AT": "iptables6"},
        )
    assert r.code == 1
    assert not any("10.91.0.2" in line for line in filter_rules(node))
    assert not list(tmp_path.glob("rb/*"))


@pytest.mark.parametrize("backend", ["iptables", "nftables"])
def test_admin_chain_overrides(
    backend: str, node: Namespace, pod_factory: Any, tmp_path: Path, plugin_dir: Path
) -> None:
    """A drop the admin puts in the admin chain wins over the plugin's accepts."""
    fw = plugin_dir / "firewall"
    confs = {}
    for name, subnet in (("p", "10.92.0.0/24"), ("q", "10.93.0.0/24")):
        pod = pod_factory()
        bconf = bridge_conf(f"fwadm{name}", f"cniadm{name}", subnet, tmp_path)
        prev = bridge(node, "ADD", bconf, name, pod)
        conf = fw_conf(bconf["name"], prev, backend=backend)
        run(node, fw, "ADD", conf, name, pod.path).ok()
        confs[name] = (pod, bconf, prev, conf)
    p, q_ip = confs["p"][0], pod_ip(confs["q"][2])
    assert p.ping(q_ip)
    if backend == "iptables":
        node.run("iptables", "-A", "CNI-ADMIN", "-d", q_ip, "-j", "DROP")
    else:
        node.run(
            "nft", "add", "rule", "inet", "pycni_firewall", "admin", "ip", "daddr", q_ip, "drop"
        )
    assert not p.ping(q_ip, timeout=1)
    # a later ADD keeps the admin's rule
    run(node, fw, "ADD", confs["p"][3], "p", p.path).ok()
    assert not p.ping(q_ip, timeout=1)
    for name, (pod, bconf, _p, conf) in confs.items():
        run(node, fw, "DEL", conf, name, pod.path).ok()
        bridge(node, "DEL", bconf, name, pod)
    if backend == "iptables":
        node.run("iptables", "-F", "CNI-ADMIN")


def test_nftables_rules_stay_constant_as_pods_grow(node: Namespace) -> None:
    """The nftables backend's rules are per network and family; pods only add set elements,
    and a DEL removes exactly its own elements."""
    import ipaddress

    from pycni.net.netfilter.nft_seam import THREAD_NFTABLES
    from pycni.plugins.meta.firewall import nft_backend as firewall_nft

    def ips(i: int) -> list[Any]:
        return [
            ipaddress.ip_address(f"10.87.{i // 200}.{2 + i % 200}"),
            ipaddress.ip_address(f"fd87::{i + 2:x}"),
        ]

    with node.entered():
        firewall_nft.add(THREAD_NFTABLES, ips(0), "fwscale", "eth0", "cid-0")
    one = nft_chain_rule_counts(node)
    with node.entered():
        for i in range(1, 40):
            firewall_nft.add(THREAD_NFTABLES, ips(i), "fwscale", "eth0", f"cid-{i}")
        firewall_nft.add(THREAD_NFTABLES, ips(7), "fwscale", "eth0", "cid-7")  # repeated ADD
    assert nft_chain_rule_counts(node) == one
    assert len(nft_pod_elements(node, "fwscale")) == 40 * 2
    with node.entered():
        firewall_nft.delete(THREAD_NFTABLES, "fwscale", "eth0", "cid-7")
        firewall_nft.check(THREAD_NFTABLES, ips(8), "fwscale", "eth0", "cid-8")
    left = nft_pod_elements(node, "fwscale")
    assert len(left) == 39 * 2 and not any(r.split(", ")[-1][:-1] == "id: cid-7" for r in left)
    assert not any(r.startswith(("10.87.0.9 ", "fd87::9 ")) for r in left)
    # another network's sets are separate: the same address can be in both
    with node.entered():
        firewall_nft.add(THREAD_NFTABLES, ips(1), "fwscale2", "eth0", "cid-1")
        firewall_nft.delete(THREAD_NFTABLES, "fwscale2", "eth0", "cid-1")
        firewall_nft.check(THREAD_NFTABLES, ips(1), "fwscale", "eth0", "cid-1")
        for i in range(40):
            firewall_nft.delete(THREAD_NFTABLES, "fwscale", "eth0", f"cid-{i}")
    assert nft_pod_elements(node, "fwscale") == []


def test_gc_records_never_name_files_elsewhere(
    node: Namespace, tmp_path: Path, plugin_dir: Path
) -> None:
    """A record whose contents (or a GC request whose attachments) name ``../`` paths cannot
    make GC read or remove a file outside the records directory."""
    records = tmp_path / "records"
    (records / "fwevil").mkdir(parents=True)
    victim = tmp_path / "victim_x"
    victim.write_text("keep me")
    (records / "fwevil" / "evil_eth0").write_text(
        json.dumps({"containerID": "../../victim", "ifname": "x", "ips": ["10.1.2.3"]})
    )
    gc = fw_conf(
        "fwevil",
        None,
        version="1.1.0",
        backend="iptables",
        dataDir=str(records),
        **{"cni.dev/valid-attachments": [{"containerID": "../../victim", "ifname": "x"}]},
    )
    with node.entered():
        exec_plugin(plugin_dir / "firewall", "GC", gc, cni_path=str(GO_DIR)).ok()
        gc["cni.dev/valid-attachments"] = []
        exec_plugin(plugin_dir / "firewall", "GC", gc, cni_path=str(GO_DIR)).ok()
    assert victim.read_text() == "keep me"
