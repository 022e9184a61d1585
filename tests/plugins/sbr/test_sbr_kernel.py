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


def _dual_pod(node: harness.Namespace, pod: harness.Namespace, host: str) -> dict[str, Any]:
    """_pod plus an IPv6 address on eth0 and a rule of table 7 from the pod's IPv4 address
    (another table's rule, which DEL with ``table`` must leave alone)."""
    prev = _pod(node, pod, host)
    pod.run("ip", "-6", "addr", "add", "fd00:100::2/64", "dev", "eth0", "nodad")
    pod.run("ip", "rule", "add", "from", "10.100.0.2", "lookup", "7")
    prev["ips"].append({"address": "fd00:100::2/64", "interface": 1})
    return prev


def _routing_both(pod: harness.Namespace) -> dict[str, Any]:
    """Rules and non-local routes of both families, as ip shows them."""
    seen: dict[str, Any] = {}
    for family in ("-4", "-6"):
        seen[f"rules{family}"] = pod.json("ip", "-j", family, "rule", "show")
        routes = pod.json("ip", "-j", family, "route", "show", "table", "all")
        seen[f"routes{family}"] = sorted(
            (r for r in routes if r.get("table") != "local"),  # type: ignore[union-attr]
            key=json.dumps,
        )
    return seen


def _table_run(
    plugin: Path, node: harness.Namespace, pod: harness.Namespace, table: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(result, routing before, after ADD, after DEL) of an ADD and DEL with ``table``."""
    prev = _dual_pod(node, pod, "sbrt0")
    conf = {**_conf(prev), "table": table}
    before = _routing_both(pod)
    with node.entered():
        out = _run(plugin, "ADD", conf, pod).ok().json
        added = _routing_both(pod)
        _run(plugin, "DEL", conf, pod).ok()
    out.pop("dns", None)
    return out, before, added, _routing_both(pod)


@pytest.mark.parametrize("table", [100, 5000])
def test_table_adds_a_rule_per_address_and_moves_no_route(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, table: int
) -> None:
    """With ``table`` (v1.6+): ``from <addr> lookup <table>`` per address, even when the
    table already has a rule (100 has one here), the routes stay where they were; DEL takes
    those rules away and leaves the same address's rule of another table."""
    pod = pod_factory()
    _out, before, added, after = _table_run(plugin_dir / "sbr", node, pod, table)
    assert added["routes-4"] == before["routes-4"] and added["routes-6"] == before["routes-6"]
    for family, src in (("-4", "10.100.0.2"), ("-6", "fd00:100::2")):
        new = [r for r in added[f"rules{family}"] if r not in before[f"rules{family}"]]
        # ip prints no srclen for a host prefix (/32, /128): the rule is for the address only
        assert [(r.get("src"), r.get("srclen"), r["table"]) for r in new] == [
            (src, None, str(table))
        ], new
    assert after == before  # table 7's rule from 10.100.0.2 is still there


@pytest.mark.interop
@pytest.mark.parametrize("table", [100, 5000])
def test_table_gives_the_rules_of_upstream(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, upstream_reference: Any, table: int
) -> None:
    """Rules and routes of both families after ADD and after DEL equal v1.9.1's."""
    seen = {}
    for impl, plugin in (
        ("pycni", plugin_dir / "sbr"),
        (upstream_reference.name, upstream_reference.plugin_dir / "sbr"),
    ):
        pod = pod_factory()
        out, _before, added, after = _table_run(plugin, node, pod, table)
        node.run("ip", "link", "del", "sbrt0")
        out["interfaces"] = [i["name"] for i in out["interfaces"]]  # type: ignore[index]
        seen[impl] = (out, added, after)
    assert seen["pycni"] == seen[upstream_reference.name], upstream_reference.label


@pytest.mark.parametrize(
    ("table", "words"),
    [
        (0, "table must be a number in [1, 4294967295], got 0"),
        (-1, "table must be a number in [1, 4294967295], got -1"),
        (2**32, "table must be a number in [1, 4294967295]"),
        ("100", 'table must be a number in [1, 4294967295], got "100"'),
        (1.5, "table must be a number"),
    ],
)
def test_bad_table_is_a_cni_error_and_changes_nothing(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, table: Any, words: str
) -> None:
    pod = pod_factory()
    prev = _dual_pod(node, pod, "sbrt0")
    before = _routing_both(pod)
    for command in ("ADD", "DEL"):
        with node.entered():
            run = _run(plugin_dir / "sbr", command, {**_conf(prev), "table": table}, pod)
        assert run.code == 1 and run.json["code"] == 7, run.stdout
        assert words in run.json["msg"], run.json  # type: ignore[operator]
        assert _routing_both(pod) == before
