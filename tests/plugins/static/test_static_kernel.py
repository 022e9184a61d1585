"""static IPAM against the Go reference on the same configs, for every spec version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import reference_differences as differences
from tests.harness import PluginRun, exec_plugin

ALL_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]


def conf(version: str, ipam: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "statnet", "type": "bridge", "ipam": ipam, **top}


BASE_IPAM: dict[str, Any] = {
    "type": "static",
    "addresses": [
        {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
        {"address": "3ffe:ffff:0:01ff::1/64", "gateway": "3ffe:ffff:0::1"},
    ],
    "routes": [
        {"dst": "0.0.0.0/0"},
        {"dst": "192.168.0.0/16", "gw": "10.10.5.1"},
        # no host bits: pycni's Route model keeps networks only (Go would echo "::1/64")
        {"dst": "3ffe:ffff:0:01ff::/64"},
    ],
    "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"]},
}

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "config": ({}, ""),
    "cni-args-ip-appended": ({}, "IP=10.10.1.7/24,fd00::7/64;GATEWAY=10.10.1.1"),
    "args-cni-ips-replace": ({"args": {"cni": {"ips": ["10.10.2.2/24", "fd02::2/64"]}}}, ""),
    "runtime-ips-win": (
        {
            "args": {"cni": {"ips": ["10.10.2.2/24"]}},
            "runtimeConfig": {"ips": ["10.10.3.3/24"]},
        },
        "",
    ),
    "gateway-for-config-address": ({}, "GATEWAY=10.10.0.254"),
}


def run(plugin: Path, command: str, config: dict[str, Any], args: str = "") -> PluginRun:
    return exec_plugin(
        plugin,
        command,
        config,
        container_id="s1",
        netns="/nonexistent/ns",
        cni_path="/x",
        cni_args=args,
    )


@pytest.fixture
def go_static(go_plugin_dir: Path) -> Path:
    """Each Go reference's static in turn (the test id names it)."""
    return go_plugin_dir / "static"


def normal(out: str) -> Any:
    data = json.loads(out)
    if isinstance(data, dict) and data.get("dns") == {} and differences.deliberate("dns-empty"):
        del data["dns"]  # dns-empty: the reference prints an empty dns object, pycni leaves it out
    if isinstance(data, dict):
        data.pop("cniVersion", None) if "code" in data else None
    return data


@pytest.mark.interop
@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_output_as_go(case: str, version: str, plugin_dir: Path, go_static: Path) -> None:
    extra, args = CASES[case]
    ipam = dict(BASE_IPAM)
    if version in ("0.1.0", "0.2.0"):
        ipam["addresses"] = ipam["addresses"][:1] if case != "config" else ipam["addresses"]
    config = conf(version, ipam, **extra)
    go = run(go_static, "ADD", config, args)
    py = run(plugin_dir / "static", "ADD", config, args)
    assert (go.code == 0) == (py.code == 0), (go.stdout, py.stdout)
    if go.code == 0:
        assert normal(py.stdout) == normal(go.stdout)
    else:
        assert py.json["msg"] == go.json["msg"]


@pytest.mark.interop
@pytest.mark.parametrize(
    ("ipam_addresses", "args"),
    [
        ([{"address": "10.10.0.5"}], ""),
        ([{"address": "10.10.0.5/255.255.255.0"}], ""),
        ([], "IP=10.10.0.9"),
        ([], "GATEWAY=nope"),
        ([], "FOO=1"),
    ],
)
def test_same_errors_as_go(
    ipam_addresses: list[Any], args: str, plugin_dir: Path, go_static: Path
) -> None:
    config = conf("1.0.0", {"type": "static", "addresses": ipam_addresses})
    go = run(go_static, "ADD", config, args)
    py = run(plugin_dir / "static", "ADD", config, args)
    assert go.code == 1 and py.code == 1
    assert py.json["code"] in (7, go.json["code"])
    assert "Traceback" not in py.stdout


def test_missing_ipam_and_del_check(plugin_dir: Path, go_static: Path) -> None:
    plugin = plugin_dir / "static"
    r = run(plugin, "ADD", {"cniVersion": "1.0.0", "name": "n", "type": "bridge"})
    assert r.code == 1 and r.json["msg"] == "IPAM config missing 'ipam' key"
    config = conf("1.0.0", BASE_IPAM)
    run(plugin, "DEL", config).ok()
    result = run(plugin, "ADD", config).ok().json
    run(plugin, "CHECK", {**config, "prevResult": result}).ok()
    wrong = json.loads(json.dumps(result))
    wrong["ips"][0]["gateway"] = "10.10.0.99"
    bad = run(plugin, "CHECK", {**config, "prevResult": wrong})
    assert bad.code == 1 and "Failed to match addr 10.10.0.5" in bad.json["msg"]
    # the reference's GO plugin agrees on both
    run(go_static, "CHECK", {**config, "prevResult": result}).ok()
    assert run(go_static, "CHECK", {**config, "prevResult": wrong}).code == 1


def test_more_than_one_address_per_family_needs_0_3(plugin_dir: Path) -> None:
    ipam = {"type": "static", "addresses": [{"address": "10.1.0.2/24"}, {"address": "10.1.0.3/24"}]}
    r = run(plugin_dir / "static", "ADD", conf("0.2.0", ipam))
    assert r.code == 1 and "more than 1 address per family" in r.json["msg"]
    out = run(plugin_dir / "static", "ADD", conf("0.3.1", ipam)).ok().json
    assert [ip["address"] for ip in out["ips"]] == ["10.1.0.2/24", "10.1.0.3/24"]
