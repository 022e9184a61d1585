"""Shared pieces of the bridge tests (no tests here): the plugin dir and small helpers.

The IPAM delegate is pycni's host-local when it is installed and loads, else the Go one
from /usr/lib/cni (set PYCNI_BRIDGE_TEST_IPAM=go or =pycni to force one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import harness

GO_DIR = Path("/usr/lib/cni")


def _pycni_host_local_works() -> bool:
    try:
        from pycni.skel import registry

        registry.load("host-local")
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def bridge_dir(plugin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CNI_PATH dir: our bridge and loopback, and a host-local."""
    d = tmp_path_factory.mktemp("bridge-plugins")
    for name in ("bridge", "loopback"):
        shutil.copy2(plugin_dir / name, d / name)
    choice = os.environ.get("PYCNI_BRIDGE_TEST_IPAM", "auto")
    use_pycni = choice == "pycni" or (
        choice == "auto" and (plugin_dir / "host-local").exists() and _pycni_host_local_works()
    )
    source = plugin_dir / "host-local" if use_pycni else GO_DIR / "host-local"
    shutil.copy2(source, d / "host-local")
    return d


@pytest.fixture(scope="session")
def go_dir(go_plugin_dir: Path) -> Path:
    """Each Go reference's plugins in turn (the test id names it: ``go-v1.9.1``)."""
    return go_plugin_dir


def conf(
    state: harness.State,
    name: str = "brnet",
    version: str = "1.0.0",
    ipam: dict[str, Any] | None = None,
    subnets: tuple[str, ...] = ("10.77.0.0/24",),
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"cniVersion": version, "name": name, "type": "bridge"}
    body["bridge"] = "cnibr0"
    if ipam is None:
        ipam = {
            "type": "host-local",
            "dataDir": str(state.data_dir),
            "ranges": [[{"subnet": s}] for s in subnets],
        }
    body["ipam"] = ipam
    body.update(extra)
    return body


def run(
    plugin_dir: Path,
    node: harness.Namespace,
    command: str,
    config: dict[str, Any],
    pod: harness.Namespace | None,
    cid: str = "ctr1",
    ifname: str = "eth0",
    netns: str | None = None,
    **kw: Any,
) -> harness.PluginRun:
    with node.entered():
        return harness.exec_plugin(
            plugin_dir / "bridge",
            command,
            config,
            container_id=cid,
            netns=netns if netns is not None else (pod.path if pod else ""),
            ifname=ifname,
            cni_path=str(plugin_dir),
            **kw,
        )


def host_veths(node: harness.Namespace) -> list[str]:
    return sorted(n for n in node.links() if n.startswith("veth"))


def nft_ruleset(ns: harness.Namespace) -> dict[str, Any]:
    out = ns.run("nft", "-j", "list", "ruleset").stdout
    data: dict[str, Any] = json.loads(out) if out.strip() else {"nftables": []}
    return data


def masq_rules(ns: harness.Namespace) -> list[str]:
    """One attachment comment per masqueraded pod address: the per-address rules of the
    reference's layout in ``masq_checks`` and the elements of pycni's per-network sets."""
    out = []
    for item in nft_ruleset(ns)["nftables"]:
        rule = item.get("rule")
        if rule and rule["table"] == "cni_plugins_masquerade" and rule["chain"] == "masq_checks":
            comment = str(rule.get("comment", ""))
            if not comment.startswith("pycni "):
                out.append(comment)
        found = item.get("set")
        if found and found["table"] == "cni_plugins_masquerade":
            for elem in found.get("elem", []):
                inner = elem.get("elem", {}) if isinstance(elem, dict) else {}
                out.append(str(inner.get("comment", "")))
    return out


def nft_chains(ns: harness.Namespace, family: str, table: str) -> list[str]:
    return [
        item["chain"]["name"]
        for item in nft_ruleset(ns)["nftables"]
        if "chain" in item and item["chain"]["family"] == family and item["chain"]["table"] == table
    ]


def sysctl_in(ns: harness.Namespace, path: str) -> str:
    return ns.run("cat", f"/proc/sys/{path}").stdout.strip()


def ip_json(ns: harness.Namespace, *argv: str) -> Any:
    out = ns.run("ip", "-j", *argv).stdout
    return json.loads(out) if out.strip() else []


def wait_ping(ns: harness.Namespace, addr: str, tries: int = 3) -> bool:
    """IPv6 addresses may still be in DAD on the gateway side: retry a little."""
    return any(ns.ping(addr, count=1, timeout=2) for _ in range(tries))


def subprocess_ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0
