"""`pycni inspect` and `pycni cleanup` against a node networked by pycni's own chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from tests import harness

PYCNI = str(Path(sys.executable).parent / "pycni")
GC_TIMEOUT = 600  # GC looks into every namespace of the machine: a shared one may have 1000s
NET = "insp-net"
BRIDGE = "insp0"

pytestmark = pytest.mark.kernel


def _conflist(data_dir: Path) -> bytes:
    return json.dumps(
        {
            "cniVersion": "1.1.0",
            "name": NET,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.77.0.0/24"}]],
                        "dataDir": str(data_dir),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
    ).encode()


class Node:
    """A node with a configured network and a way to attach pods and run inspect."""

    def __init__(self, node: harness.Namespace, state: harness.State, cni_path: str) -> None:
        self.node = node
        self.state = state
        self.raw = _conflist(state.data_dir)
        (state.conf_dir / "10-insp.conflist").write_bytes(self.raw)
        self.cni = CNIConfig([cni_path], cache_dir=str(state.cache_dir))
        self.cni_path = cni_path

    def attach(self, pod: harness.Namespace, port: int) -> str:
        rt = RuntimeConf(
            container_id=pod.name,
            netns=pod.path,
            ifname="eth0",
            capability_args={
                "portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]
            },
        )
        with self.node.entered():
            result = self.cni.add_network_list(conf_list_from_bytes(self.raw), rt)
        return str(result.ips[0].address.ip)

    def dirs(self) -> list[str]:
        return [
            "--netconf-dir",
            str(self.state.conf_dir),
            "--cache-dir",
            str(self.state.cache_dir),
            "--data-dir",
            str(self.state.data_dir),
        ]

    def inspect(self, *extra: str) -> dict[str, Any]:
        proc = self.node.run(PYCNI, "inspect", *self.dirs(), "--json", *extra, timeout=GC_TIMEOUT)
        data = json.loads(proc.stdout)
        assert isinstance(data, dict)
        return data


@pytest.fixture
def net(node: harness.Namespace, tmp_state: harness.State, cni_path: str) -> Node:
    return Node(node, tmp_state, cni_path)


def _kinds(data: dict[str, Any]) -> set[str]:
    return {leak["kind"] for leak in data["leaks"]}


def test_inspect_shows_pods_bridge_veths_and_mappings(
    net: Node, pod_factory: Callable[[], harness.Namespace]
) -> None:
    pods = [pod_factory(), pod_factory()]
    addrs = [net.attach(pod, 8080 + i) for i, pod in enumerate(pods)]
    data = net.inspect()
    assert [n["name"] for n in data["networks"]] == [NET]
    assert {a["container_id"] for a in data["attachments"]} == {p.name for p in pods}
    assert sorted(r["ip"] for r in data["reservations"]) == sorted(addrs)
    (bridge,) = data["bridges"]
    assert bridge["name"] == BRIDGE and len(bridge["ports"]) == 2
    peers = {v["peer"]["namespace"]: v["peer"] for v in data["veths"] if v["peer"]}
    for pod, addr in zip(pods, addrs, strict=True):
        assert peers[pod.name]["name"] == "eth0"
        assert f"{addr}/24" in peers[pod.name]["addresses"]
    assert sorted((m["host_port"], m["target_ip"]) for m in data["port_mappings"]) == sorted(
        (8080 + i, a) for i, a in enumerate(addrs)
    )
    assert any(r["dst"] == "10.77.0.0/24" and r["dev"] == BRIDGE for r in data["routes"])
    (masq,) = data["masquerades"]
    assert (masq["network"], masq["subnet"], masq["backend"]) == (NET, "10.77.0.0/24", "nftables")
    assert sorted(masq["addresses"]) == sorted(addrs)
    assert data["leaks"] == []
    text = net.node.run(PYCNI, "inspect", *net.dirs(), timeout=GC_TIMEOUT).stdout
    for word in ("Networks", "Attachments", "Reservations", "Bridges", "Veths", "Port mappings"):
        assert word in text
    assert f"{NET}  from 10.77.0.0/24  2 pod addresses" in text
    assert "netns:[" not in text  # the node is named, never an inode
    assert "Leaks: none" in text


@pytest.mark.parametrize("command", ["cleanup", "gc"])
def test_leaks_with_evidence_are_reported_and_cleaned(
    net: Node, pod_factory: Callable[[], harness.Namespace], command: str
) -> None:
    keep, gone, stray = pod_factory(), pod_factory(), pod_factory()
    keep_ip = net.attach(keep, 8080)
    net.attach(gone, 8081)
    gone.delete()  # attachment with a dead namespace, and its mapping now points nowhere
    ghost = net.state.data_dir / NET / "10.77.0.200"
    ghost.write_bytes(b"ghost-container\r\neth0")  # no attachment, and its address is nowhere
    net.node.run(
        "ip", "link", "add", "vstray0", "type", "veth", "peer", "name", "eth0", "netns", stray.name
    )
    net.node.run("ip", "link", "set", "vstray0", "master", BRIDGE, "up")  # pod end: a live ns

    assert net.inspect()["leaks"] == []  # all of it is younger than the grace period
    data = net.inspect("--grace-period", "0")
    assert _kinds(data) == {"attachment", "reservation", "mapping"}
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for leak in data["leaks"]:
        by_kind.setdefault(leak["kind"], []).append(leak)
    assert [a["container_id"] for a in by_kind["attachment"]] == [gone.name]
    assert "is gone" in by_kind["attachment"][0]["reason"]
    reservations = {r["container_id"]: r for r in by_kind["reservation"]}
    assert set(reservations) == {gone.name, "ghost-container"}
    assert reservations["ghost-container"]["subject"] == str(ghost)
    assert "no cached attachment" in reservations["ghost-container"]["reason"]
    assert "8081" in by_kind["mapping"][0]["reason"]
    check = net.node.run(
        PYCNI,
        "inspect",
        *net.dirs(),
        "--check",
        "--grace-period",
        "0",
        check=False,
        timeout=GC_TIMEOUT,
    )
    assert check.returncode == 3

    if command == "cleanup":
        proc = net.node.run(
            PYCNI,
            "cleanup",
            *net.dirs(),
            "--cni-path",
            net.cni_path,
            "--grace-period",
            "0",
            check=False,
            timeout=GC_TIMEOUT,
        )
    else:  # `pycni gc` without NETWORK and NETNS: the same, configured like cnitool
        env = {
            **os.environ,
            "NETCONFPATH": str(net.state.conf_dir),
            "CNI_PATH": net.cni_path,
        }
        proc = net.node.run(
            PYCNI,
            "gc",
            "--cache-dir",
            str(net.state.cache_dir),
            "--grace-period",
            "0",
            check=False,
            env=env,
            timeout=GC_TIMEOUT,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = net.inspect("--grace-period", "0")
    assert after["leaks"] == []
    assert [a["container_id"] for a in after["attachments"]] == [keep.name]
    assert [r["ip"] for r in after["reservations"]] == [keep_ip]
    assert [m["host_port"] for m in after["port_mappings"]] == [8080]
    assert "vstray0" in net.node.links()  # its pod end is in a live namespace: not proven gone
    assert not ghost.exists()
    assert net.state.cache_files() == [f"{NET}-{keep.name}-eth0"]


def test_svg_names_every_pod_and_interface(
    net: Node, pod_factory: Callable[[], harness.Namespace], tmp_path: Path
) -> None:
    pods = [pod_factory(), pod_factory()]
    for i, pod in enumerate(pods):
        net.attach(pod, 9000 + i)
    svg = tmp_path / "topology.svg"
    data = net.inspect("--svg", str(svg))
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(el.text or "" for el in root.iter("{http://www.w3.org/2000/svg}text"))
    for pod in pods:
        assert pod.name in texts
    for veth in data["veths"]:
        assert veth["name"] in texts
        assert veth["peer"]["name"] in texts
        for addr in veth["peer"]["addresses"]:
            assert addr in texts
    assert BRIDGE in texts
    assert "Masquerade (1)" in texts and f"{NET}: 10.77.0.0/24" in texts


def test_the_daemon_is_found_from_the_entry_points(
    node: harness.Namespace, tmp_state: harness.State, tmp_path: Path
) -> None:
    """No --socket: the daemon asked is the one the entry points forward to, wherever its
    socket is; from another mount namespace the report says calls from there run in-process,
    and why."""
    from pycni.entrypoints import install

    sock = str(tmp_path / "d" / "pycni.sock")
    os.makedirs(os.path.dirname(sock))
    install.install(tmp_path / "bin", form="python", socket_path=sock, names=["bridge", "ptp"])
    dirs = ["--netconf-dir", str(tmp_state.conf_dir), "--cache-dir", str(tmp_state.cache_dir)]
    argv = [PYCNI, "inspect", *dirs, "--cni-path", str(tmp_path / "bin")]
    text = node.run(*argv).stdout
    assert (
        f"Daemon: not running on {sock}; 2 entry points forward to it; calls run in-process" in text
    )
    with harness.running_daemon(sock, "ERROR"):
        text = node.run(*argv).stdout
        assert f"Daemon: answering on {sock} (pid " in text
        assert "2 entry points forward to it; calls from here run through the daemon" in text
        other = node.run("unshare", "--mount", "--propagation", "private", *argv).stdout
        line = next(ln for ln in other.splitlines() if ln.startswith("Daemon:"))
        assert line.startswith(f"Daemon: answering on {sock}; 2 entry points forward to it")
        assert (
            "calls from here run in-process: this process runs in another mount namespace" in line
        )
        assert "; )" not in line


def test_an_unnamed_node_is_not_labelled_by_inode(tmp_state: harness.State) -> None:
    argv = ["unshare", "--net", PYCNI, "inspect", "--json", "--cache-dir", str(tmp_state.cache_dir)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    label = json.loads(proc.stdout)["netns"]
    assert label == "this namespace (not named in /run/netns)", label
