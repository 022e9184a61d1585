"""sbr against the real kernel: rules and per-source tables equal the Go reference's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = pytest.mark.kernel


def _pod(node: harness.Namespace, pod: harness.Namespace, host: str) -> dict[str, Any]:
    """eth0 (veth to the node) with 10.100.0.2/24, a default route and a static route."""
    node.run(
        "ip", "link", "add", "name", host, "type", "veth", "peer", "name", "eth0", "netns", pod.path
    )
    node.run("ip", "link", "set", host, "up")
    pod.run("ip", "addr", "add", "10.100.0.2/24", "dev", "eth0")
    pod.run("ip", "link", "set", "eth0", "up")
    pod.run("ip", "route", "add", "default", "via", "10.100.0.1", "dev", "eth0")
    pod.run("ip", "route", "add", "10.200.0.0/16", "via", "10.100.0.1", "dev", "eth0")
    # An existing rule of table 100 makes both implementations skip to 101.
    pod.run("ip", "rule", "add", "from", "192.0.2.9", "lookup", "100")
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": host}, {"name": "eth0", "sandbox": pod.path}],
        "ips": [{"address": "10.100.0.2/24", "gateway": "10.100.0.1", "interface": 1}],
    }


def _conf(prev: dict[str, Any] | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "sbrnet", "type": "sbr"}
    if prev is not None:
        conf["prevResult"] = prev
    return conf


def _routing(pod: harness.Namespace) -> dict[str, Any]:
    rules = pod.json("ip", "-j", "rule", "show")
    routes = [
        {k: v for k, v in r.items() if k not in ("flags",)}
        for r in pod.json("ip", "-j", "-4", "route", "show", "table", "all")  # type: ignore[union-attr]
        if r.get("table") != "local"
    ]
    return {"rules": rules, "routes": sorted(routes, key=json.dumps)}


def _run(
    plugin: Path, command: str, conf: dict[str, Any], pod: harness.Namespace, **kw: Any
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin, command, conf, container_id="ctr1", netns=pod.path, cni_path="/nonexistent", **kw
    )


@pytest.mark.interop
def test_same_rules_and_tables_as_go_reference_after_add_and_del(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, go_plugin_dir: Path
) -> None:
    seen = []
    for n, plugin in enumerate((plugin_dir / "sbr", go_plugin_dir / "sbr")):
        pod = pod_factory()
        prev = _pod(node, pod, f"sbrh{n}")
        with node.entered():
            out = _run(plugin, "ADD", _conf(prev), pod).ok().json
        added = _routing(pod)
        with node.entered():
            _run(plugin, "DEL", _conf(prev), pod).ok()
        out["interfaces"] = len(out["interfaces"])  # type: ignore[arg-type]
        out.pop("dns", None)
        seen.append((out, added, _routing(pod)))
    assert seen[0] == seen[1]
    ours = seen[0][1]
    assert any(r.get("src") == "10.100.0.2" and r["table"] == "101" for r in ours["rules"])
    assert all(r.get("table") == "101" for r in ours["routes"])  # nothing left in main
    assert {"dst": "default", "gateway": "10.100.0.1", "dev": "eth0", "table": "101"} in [
        {k: r[k] for k in ("dst", "gateway", "dev", "table") if k in r} for r in ours["routes"]
    ]
    assert not any(r.get("src") == "10.100.0.2" for r in seen[0][2]["rules"])


def test_replies_leave_by_the_address_table(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    """After sbr the main table has no route out of eth0, yet the pod still reaches the node
    from its address: the source rule sends it through table 101."""
    pod = pod_factory()
    prev = _pod(node, pod, "sbrh0")
    node.run("ip", "addr", "add", "10.100.0.1/24", "dev", "sbrh0")
    with node.entered():
        _run(plugin_dir / "sbr", "ADD", _conf(prev), pod).ok()
    main = pod.json("ip", "-j", "-4", "route", "show", "table", "main")
    assert main == []
    assert not pod.ping("10.100.0.1", timeout=1)  # no source given: main table, no route
    ping = ("ping", "-c", "1", "-W", "3", "-I", "10.100.0.2", "10.100.0.1")
    assert pod.run(*ping, check=False).returncode == 0
    route = pod.json("ip", "-j", "route", "get", "10.200.1.1", "from", "10.100.0.2")
    assert route[0]["gateway"] == "10.100.0.1"  # type: ignore[index]


@pytest.mark.parametrize("step", ["rule", "default-route", "copy-route", "delete-route"])
def test_failed_add_restores_the_routing(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, step: str
) -> None:
    pod = pod_factory()
    prev = _pod(node, pod, "sbrh0")
    before = _routing(pod)
    with node.entered():
        run = _run(
            plugin_dir / "sbr", "ADD", _conf(prev), pod, extra_env={"PYCNI_TEST_FAIL_AT": step}
        )
    assert run.code == 1 and step in run.json["msg"]  # type: ignore[operator]
    assert _routing(pod) == before


def test_del_is_idempotent_and_errors_are_cni_errors(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path
) -> None:
    pod = pod_factory()
    prev = _pod(node, pod, "sbrh0")
    with node.entered():
        _run(plugin_dir / "sbr", "ADD", _conf(prev), pod).ok()
        for _ in range(2):
            _run(plugin_dir / "sbr", "DEL", _conf(prev), pod).ok()
        gone = harness.Namespace(pod.name + "-gone")
        _run(plugin_dir / "sbr", "DEL", _conf(prev), gone).ok()
        run = _run(plugin_dir / "sbr", "ADD", _conf(None), pod)
        assert run.code == 1 and "chained plugin" in run.json["msg"]  # type: ignore[operator]
        no_ips = {**prev, "ips": []}
        run = _run(plugin_dir / "sbr", "ADD", _conf(no_ips), pod)
        assert run.code == 1 and "No IP addresses" in run.json["msg"]  # type: ignore[operator]
