"""Conformance of every registered plugin type (issue 26, item 6), the kernel side.

- Cold path: every type's installed in-process entry point answers VERSION importing none of
  pycni.skel.cold_path.OFF_PATH beyond the type's cold_path.DEBT (its ADD and DEL are checked
  against the whole named list by tests/integration/test_cold_path_imports.py).
- Rollback: each main plugin's ADD, with a failure injected at each of its steps in turn
  (pycni.skel.rollback's PYCNI_TEST_FAIL_AT), leaves the node and pod namespaces as they
  were after one pod's ADD and DEL (the node's shared part of the network, such as a bridge,
  stays then, as with the reference): links, addresses, routes, rules, the nft ruleset and
  the IPAM reservations. The steps
  are not listed here: a first, successful ADD records the names its Rollback.step calls
  pass, so a step added to a plugin is injected without editing this file.

The checks that need no kernel (docs page, hostile-config entry, VERSION) are in
tests/unit/test_plugin_conformance.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pycni.entrypoints import install
from pycni.skel import cold_path, registry
from pycni.skel import run as skel
from pycni.skel.rollback import FAIL_AT_ENV, Rollback
from tests import harness
from tests.integration.test_cold_path_imports import run_traced

pytestmark = pytest.mark.kernel

TYPES = sorted(registry.PLUGIN_TYPES)


@pytest.fixture(scope="module")
def entry_points(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every registered type installed as an in-process entry point."""
    directory = tmp_path_factory.mktemp("conformance-bin")
    install.install(directory, form="inprocess")
    return directory


def _heavy(modules: set[str]) -> set[str]:
    return {
        heavy for name in modules for heavy in cold_path.OFF_PATH
        if name == heavy or name.startswith(heavy + ".")
    }  # fmt: skip


@pytest.mark.parametrize("plugin_type", TYPES)
def test_entry_point_keeps_the_cold_path_rule(plugin_type: str, entry_points: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    modules, reply = run_traced(entry_points / plugin_type, "VERSION", {"cniVersion": "1.0.0"}, env)
    assert reply.exit_code == 0, reply.stdout
    heavy = _heavy(modules)
    allowed = cold_path.DEBT.get(plugin_type, frozenset())
    assert heavy <= allowed, f"{plugin_type} now imports {sorted(heavy - allowed)} on its path"


# ------------------------------------------------------------------ rollback at every step


def snapshot(ns: harness.Namespace) -> dict[str, Any]:
    """What a failed ADD must leave as it found it in one namespace (IPv6 link-local
    addresses and routes, which the kernel makes by itself when a link comes up, left out)."""
    links = []
    for link in ns.links().values():
        info = link.get("linkinfo") or {}
        links.append(
            (
                link["ifname"],
                info.get("info_kind", "") if isinstance(info, dict) else "",
                link.get("mtu"),
                link.get("master", ""),
                link.get("address", ""),
                "UP" in str(link.get("flags", [])),
                link.get("ifalias", ""),
            )
        )
    addresses = []
    for item in ns.json("ip", "-j", "addr", "show"):  # type: ignore[union-attr]
        for a in item.get("addr_info", []):
            if not str(a["local"]).startswith("fe80:"):
                addresses.append((item["ifname"], f"{a['local']}/{a['prefixlen']}"))
    routes = []
    for family in ("-4", "-6"):
        for r in ns.json("ip", "-j", family, "route", "show", "table", "all"):  # type: ignore[union-attr]
            dst = str(r.get("dst", ""))
            if dst.startswith(("fe80", "ff00", "multicast")) or dst == "fe80::/64":
                continue
            routes.append(
                (dst, r.get("dev", ""), r.get("gateway", ""), r.get("table", "main"), r.get("type"))
            )
    rules = ns.run("ip", "rule", "show").stdout + ns.run("ip", "-6", "rule", "show").stdout
    return {
        "links": sorted(links),
        "addresses": sorted(addresses),
        "routes": sorted(map(str, routes)),
        "rules": rules,
        "nft": ns.run("nft", "list", "ruleset").stdout,
    }


def reservations(data_dir: Path) -> list[str]:
    """host-local's reservation files (its lock and last_reserved_ip may stay)."""
    if not data_dir.exists():
        return []
    return sorted(
        str(p.relative_to(data_dir))
        for p in data_dir.rglob("*")
        if p.is_file() and p.name != "lock" and not p.name.startswith("last_reserved_ip")
    )


def _ipam(data_dir: Path, subnet: str) -> dict[str, Any]:
    return {"type": "host-local", "dataDir": str(data_dir), "ranges": [[{"subnet": subnet}]]}


def _bridge(node: harness.Namespace, data_dir: Path) -> dict[str, Any]:
    return {
        "type": "bridge", "bridge": "cnfbr0", "isGateway": True, "ipMasq": True,
        "hairpinMode": True, "macspoofchk": True, "ipam": _ipam(data_dir, "10.93.0.0/24"),
    }  # fmt: skip


def _ptp(node: harness.Namespace, data_dir: Path) -> dict[str, Any]:
    return {"type": "ptp", "ipMasq": True, "ipam": _ipam(data_dir, "10.94.0.0/24")}


def _macvlan(node: harness.Namespace, data_dir: Path) -> dict[str, Any]:
    node.run("ip", "link", "add", "cnfm0", "type", "veth", "peer", "name", "cnfm1")
    node.run("ip", "link", "set", "cnfm0", "up")
    return {"type": "macvlan", "master": "cnfm0", "ipam": _ipam(data_dir, "10.95.0.0/24")}


def _host_device(node: harness.Namespace, data_dir: Path) -> dict[str, Any]:
    node.run("ip", "link", "add", "cnfhd0", "type", "veth", "peer", "name", "cnfhd1")
    node.run("ip", "link", "set", "cnfhd0", "up")
    return {"type": "host-device", "device": "cnfhd0", "ipam": _ipam(data_dir, "10.96.0.0/24")}


def _tap(node: harness.Namespace, data_dir: Path) -> dict[str, Any]:
    return {"type": "tap", "mtu": 1400, "ipam": _ipam(data_dir, "10.92.0.0/24")}


# main plugin type -> what it needs on the node, and its config (name and version added)
MAIN_PLUGINS: dict[str, Callable[[harness.Namespace, Path], dict[str, Any]]] = {
    "bridge": _bridge,
    "ptp": _ptp,
    "macvlan": _macvlan,
    "host-device": _host_device,
    "tap": _tap,
}


def _call(
    node: harness.Namespace,
    plugin_type: str,
    command: str,
    config: dict[str, Any],
    pod: harness.Namespace,
    bindir: Path,
    fail_at: str = "",
) -> skel.Outcome:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "conform1",
        "CNI_NETNS": pod.path,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(bindir),
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
    }
    if fail_at:
        env[FAIL_AT_ENV] = fail_at
    with node.entered():
        return skel.run(plugin_type, env, json.dumps(config).encode())


@pytest.mark.parametrize("plugin_type", sorted(MAIN_PLUGINS))
def test_a_failure_at_each_step_leaves_both_namespaces_as_they_were(
    plugin_type: str,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_path: Path,
    entry_points: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = pod_factory()
    data_dir = tmp_path / "ipam"
    config = {
        "cniVersion": "1.0.0",
        "name": "conformnet",
        **MAIN_PLUGINS[plugin_type](node, data_dir),
    }
    steps: list[str] = []
    original = Rollback.step

    def recording(self: Rollback, name: str) -> None:
        if name not in steps:
            steps.append(name)
        original(self, name)

    with monkeypatch.context() as patch:
        patch.setattr(Rollback, "step", recording)
        added = _call(node, plugin_type, "ADD", config, pod, entry_points)
    assert added.exit_code == 0, added.stdout
    assert "eth0" in pod.links()
    deleted = _call(node, plugin_type, "DEL", config, pod, entry_points)
    assert deleted.exit_code == 0, deleted.stdout
    assert len(steps) >= 2, f"{plugin_type} marks no steps: {steps}"
    # what one pod's ADD and DEL leave is the node's share of the network (a bridge and its
    # gateway address, the masquerade table, as the reference keeps them): a failed ADD must
    # leave exactly that
    before = (snapshot(node), snapshot(pod), reservations(data_dir))

    failures = []
    for step in steps:
        outcome = _call(node, plugin_type, "ADD", config, pod, entry_points, fail_at=step)
        reply = json.loads(outcome.stdout)
        if outcome.exit_code != 1 or f"injected failure at step {step!r}" not in reply["msg"]:
            failures.append(f"{step}: not injected: {reply}")
            continue
        if "rollback incomplete" in str(reply.get("details", "")):
            failures.append(f"{step}: {reply['details']}")
        after = (snapshot(node), snapshot(pod), reservations(data_dir))
        for what, old, new in zip(("node", "pod", "IPAM"), before, after, strict=True):
            if old != new:
                failures.append(f"{step}: the {what} changed: {_diff(old, new)}")
    assert not failures, f"{plugin_type} (steps {steps}):\n" + "\n".join(failures)


def _diff(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        return "; ".join(
            f"{key}: {_diff(old[key], new.get(key))}" for key in old if old[key] != new.get(key)
        )
    if isinstance(old, list) and isinstance(new, list):
        return f"gone {[x for x in old if x not in new]}, new {[x for x in new if x not in old]}"
    return f"{old!r} -> {new!r}"
