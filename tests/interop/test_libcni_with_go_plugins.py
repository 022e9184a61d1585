"""pycni's runtime driving the Go reference plugins (loopback, bridge + host-local, portmap).

Everything runs inside a private node namespace: ``node.entered()`` switches this thread into
it, and the plugins the runtime execs from this thread inherit it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime import (
    CNIConfig,
    GCArgs,
    GCAttachment,
    RawExec,
    RuntimeConf,
    conf_list_from_bytes,
    load_network_conf,
)
from pycni.spec.errors import CNIError
from tests import harness, node_view
from tests import reference_differences as differences
from tests.harness import Namespace, State
from tests.references import Reference

pytestmark = [pytest.mark.interop, pytest.mark.kernel]

SUBNET = "10.77.0.0/24"
PORTS = [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]


def _bridge(state: State) -> dict[str, Any]:
    return {
        "type": "bridge",
        "bridge": "cnitest0",
        "isGateway": True,
        "ipMasq": False,
        "ipam": {
            "type": "host-local",
            "subnet": SUBNET,
            "dataDir": str(state.data_dir),
            "routes": [{"dst": "0.0.0.0/0"}],
        },
    }


def _write_confs(state: State, version: str) -> None:
    pod_net = {
        "cniVersion": version,
        "name": "podnet",
        "plugins": [
            _bridge(state),
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }
    lo_net = {"cniVersion": version, "name": "lonet", "plugins": [{"type": "loopback"}]}
    (state.conf_dir / "10-podnet.conflist").write_text(json.dumps(pod_net))
    (state.conf_dir / "05-lonet.conflist").write_text(json.dumps(lo_net))


def _cni(go_plugin_dir: Path, state: State) -> CNIConfig:
    return CNIConfig(
        [str(go_plugin_dir)], cache_dir=str(state.cache_dir), exec=RawExec(), timeout=60
    )


def _rt(pod: Namespace, ifname: str = "eth0", ports: bool = False) -> RuntimeConf:
    caps: dict[str, Any] = {"portMappings": PORTS} if ports else {}
    return RuntimeConf(
        container_id=f"ctr-{pod.name}",
        netns=pod.path,
        ifname=ifname,
        args=(("IgnoreUnknown", "1"),),
        capability_args=caps,
    )


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0"])
def test_add_ping_check_del(
    version: str,
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    tmp_state: State,
    go_plugin_dir: Path,
) -> None:
    _write_confs(tmp_state, version)
    pods = [pod_factory(), pod_factory()]
    cni = _cni(go_plugin_dir, tmp_state)
    pod_net = load_network_conf(str(tmp_state.conf_dir), "podnet")
    lo_net = load_network_conf(str(tmp_state.conf_dir), "lonet")
    # CHECK without portmap: Go portmap's CHECK fails on IPv4-only pods (plugins#819)
    check_net = conf_list_from_bytes(
        json.dumps(
            {"cniVersion": version, "name": "podnet", "plugins": [_bridge(tmp_state)]}
        ).encode()
    )
    addresses: list[str] = []
    with node.entered():
        for index, pod in enumerate(pods):
            lo_result = cni.add_network_list(lo_net, _rt(pod, "lo"))
            assert lo_result.cni_version == version
            result = cni.add_network_list(pod_net, _rt(pod, ports=index == 0))
            assert result.cni_version == version
            printed = json.loads(result.to_json())
            assert printed["cniVersion"] == version
            assert printed["ips"][0]["address"].startswith("10.77.0.")
            if version != "1.0.0":
                assert printed["ips"][0]["version"] == "4"
            addresses.append(printed["ips"][0]["address"].split("/")[0])
            cached = cni.get_network_list_cached_result(pod_net, _rt(pod))
            assert cached is not None and cached.to_dict() == result.to_dict()
    for pod, address in zip(pods, addresses, strict=True):
        assert address in " ".join(pod.addresses("eth0"))
    assert pods[0].ping(addresses[1])
    assert pods[1].ping(addresses[0])
    assert len(tmp_state.reservations("podnet")) == 2
    assert len(tmp_state.cache_files()) == 4

    with node.entered():
        for pod in pods:
            if version == "0.3.1":
                with pytest.raises(CNIError) as info:
                    cni.check_network_list(check_net, _rt(pod))
                assert info.value.code == 1
            else:
                cni.check_network_list(check_net, _rt(pod))
        for index, pod in enumerate(pods):
            for _ in range(2):  # DEL is idempotent
                cni.del_network_list(pod_net, _rt(pod, ports=index == 0))
                cni.del_network_list(lo_net, _rt(pod, "lo"))
    assert tmp_state.reservations("podnet") == []
    assert tmp_state.cache_files() == []
    for pod in pods:
        assert "eth0" not in pod.links()


def test_check_detects_a_removed_address(
    node: Namespace, pod_factory: Callable[[], Namespace], tmp_state: State, go_plugin_dir: Path
) -> None:
    conf = conf_list_from_bytes(
        json.dumps(
            {"cniVersion": "1.0.0", "name": "podnet", "plugins": [_bridge(tmp_state)]}
        ).encode()
    )
    pod = pod_factory()
    cni = _cni(go_plugin_dir, tmp_state)
    with node.entered():
        result = cni.add_network_list(conf, _rt(pod))
        address = f"{result.ips[0].address}"
        pod.run("ip", "addr", "del", address, "dev", "eth0")
        with pytest.raises(CNIError):
            cni.check_network_list(conf, _rt(pod))
        cni.del_network_list(conf, _rt(pod))
    assert tmp_state.reservations("podnet") == []


def test_gc_removes_attachments_not_in_the_valid_list(
    node: Namespace, pod_factory: Callable[[], Namespace], tmp_state: State, go_plugin_dir: Path
) -> None:
    _write_confs(tmp_state, "1.0.0")
    conf = load_network_conf(str(tmp_state.conf_dir), "podnet")
    keep, stale = pod_factory(), pod_factory()
    cni = _cni(go_plugin_dir, tmp_state)
    with node.entered():
        cni.add_network_list(conf, _rt(keep))
        cni.add_network_list(conf, _rt(stale))
        assert len(node.links()) >= 3  # bridge + two host veths
        cni.gc_network_list(conf, GCArgs((GCAttachment(f"ctr-{keep.name}", "eth0"),)))
        remaining = [a.container_id for a in cni.get_cached_attachments()]
        assert remaining == [f"ctr-{keep.name}"]
        assert len(tmp_state.reservations("podnet")) == 1
        assert "eth0" not in stale.links()
        assert "eth0" in keep.links()
        cni.del_network_list(conf, _rt(keep))
    assert tmp_state.reservations("podnet") == []
    assert tmp_state.cache_files() == []


def test_cli_add_del_against_go_plugins(
    node: Namespace, pod_factory: Callable[[], Namespace], tmp_state: State, go_plugin_dir: Path
) -> None:
    _write_confs(tmp_state, "1.0.0")
    pod = pod_factory()
    env = {
        **os.environ,
        "NETCONFPATH": str(tmp_state.conf_dir),
        "CNI_PATH": str(go_plugin_dir),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    base = [sys.executable, "-m", "pycni.cli.main"]
    cache = ["--cache-dir", str(tmp_state.cache_dir)]
    added = node.run(*base, "add", *cache, "podnet", pod.path, env=env)
    assert not added.stdout.endswith("\n")
    result = json.loads(added.stdout)
    assert result["cniVersion"] == "1.0.0"
    assert result["ips"][0]["address"].startswith("10.77.0.")
    assert len(tmp_state.cache_files()) == 1
    assert tmp_state.cache_files()[0].startswith("podnet-cnitool-")
    checked = node.run(*base, "check", *cache, "podnet", pod.path, env=env, check=False)
    # portmap 1.1.1 CHECK fails on IPv4-only pods; either way the CLI must not print a result
    assert checked.stdout == ""
    deleted = node.run(*base, "del", *cache, "podnet", pod.path, env=env)
    assert deleted.stdout == ""
    assert tmp_state.cache_files() == []
    assert tmp_state.reservations("podnet") == []


@pytest.mark.parametrize("masq", ["none", "iptables", "nftables"])
def test_go_plugins_and_ours_leave_the_same_node(
    masq: str,
    pod_factory: Callable[[], Namespace],
    tmp_path: Path,
    go_plugin_dir: Path,
    go_reference: Reference,
    plugin_dir: Path,
) -> None:
    """The same conflists (loopback; bridge + portmap) run by this runtime with the Go
    plugins and with pycni's on twin nodes: what ip/tc/bridge/nft show on the node and in a
    pod after the ADDs and after the last DEL (tests/node_view.py). portmap on its iptables
    backend (pycni's nftables one keeps its own table: ``portmap-nft-maps``); masquerade on
    each backend the reference has."""
    if masq == "nftables" and differences.applies("no-nftables-backend", go_reference):
        pytest.skip(f"Go plugins {go_reference.name} have no nftables masquerade")
    views: dict[str, list[dict[str, Any]]] = {}
    for impl, plugins in (("go", go_plugin_dir), ("pycni", plugin_dir)):
        node = harness.create_namespace("node")
        try:
            state = State.make(tmp_path / impl)
            _write_confs(state, "1.0.0")
            conf = json.loads((state.conf_dir / "10-podnet.conflist").read_text())
            backend = "nftables" if masq == "nftables" else "iptables"
            conf["plugins"][0].update(ipMasq=masq != "none", ipMasqBackend=backend)
            conf["plugins"][1]["backend"] = "iptables"
            (state.conf_dir / "10-podnet.conflist").write_text(json.dumps(conf))
            cni = _cni(plugins, state)
            pod_net = load_network_conf(str(state.conf_dir), "podnet")
            lo_net = load_network_conf(str(state.conf_dir), "lonet")
            pods = [pod_factory(), pod_factory()]
            node_view.without_dad(node, *pods)
            with node.entered():
                for index, pod in enumerate(pods):
                    cni.add_network_list(lo_net, _same_id(pod, index, "lo"))
                    cni.add_network_list(pod_net, _same_id(pod, index, ports=index == 0))
            views[impl] = [{"node": node_view.snapshot(node), "pod": node_view.snapshot(pods[0])}]
            with node.entered():
                for index, pod in enumerate(pods):
                    cni.del_network_list(pod_net, _same_id(pod, index, ports=index == 0))
                    cni.del_network_list(lo_net, _same_id(pod, index, "lo"))
            views[impl].append(
                {"node": node_view.snapshot(node), "pod": node_view.snapshot(pods[0])}
            )
            assert state.reservations("podnet") == [] and state.cache_files() == []
        finally:
            node.delete()
    whens = ("after the ADDs", "after the last DEL")
    for when, ours, theirs in zip(whens, views["pycni"], views["go"], strict=True):
        what = f"bridge + portmap, masquerade {masq}, {when}"
        node_view.compare(ours, theirs, what, go_reference)


def _same_id(pod: Namespace, index: int, ifname: str = "eth0", ports: bool = False) -> RuntimeConf:
    """_rt with a container ID that is the same on both nodes (chain names hash it)."""
    rt = _rt(pod, ifname, ports)
    return RuntimeConf(
        container_id=f"ctr-{index}",
        netns=rt.netns,
        ifname=rt.ifname,
        args=rt.args,
        capability_args=rt.capability_args,
    )
