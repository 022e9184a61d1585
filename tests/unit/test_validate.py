"""`pycni validate`'s config check (pycni.plugins.config_check): typos get the closest known key,
values ADD would refuse are errors with ADD's message, chains that cannot work are caught, and
the configs the docs and the runtimes use raise nothing (no false alarms)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pycni.cli.main import main
from pycni.plugins import config_check
from pycni.spec.conf import conf_list_from_bytes

ROOT = Path(__file__).resolve().parents[2]


def _findings(doc: dict[str, Any]) -> list[config_check.Finding]:
    conf = conf_list_from_bytes(json.dumps(doc).encode())
    return config_check.check_network(conf, "net.conflist", plugin_found=lambda _t: False)


def _chain(*plugins: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "net", "plugins": list(plugins)}


def _bridge(**extra: Any) -> dict[str, Any]:
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}
    return {"type": "bridge", "bridge": "cni9", "ipam": ipam, **extra}


def _said(findings: list[config_check.Finding]) -> list[tuple[str, str, str]]:
    return [(f.severity, f.path, f.message) for f in findings]


def test_typos_name_the_closest_key() -> None:
    doc = _chain({**_bridge(), "brigde": "br0", "isGatway": True})
    assert _said(_findings(doc)) == [
        ("warning", "plugins[0].brigde", "unknown key `brigde`; did you mean `bridge`?"),
        ("warning", "plugins[0].isGatway", "unknown key `isGatway`; did you mean `isGateway`?"),
    ]


def test_keys_match_as_add_reads_them_case_insensitively() -> None:
    assert _findings(_chain(_bridge(isgateway=True, IPMASQ=True))) == []


def test_nested_keys_are_checked_where_add_decodes_them() -> None:
    bad = _bridge()
    bad["ipam"]["ranges"][0][0]["rangeStrat"] = "10.1.0.10"
    bad["ipam"]["routes"] = [{"dst": "0.0.0.0/0", "gateway": "10.1.0.1"}]
    said = _said(_findings(_chain(bad)))
    assert (
        "warning",
        "plugins[0].ipam.ranges[0][0].rangeStrat",
        "unknown key `rangeStrat`; did you mean `rangeStart`?",
    ) in said
    assert ("warning", "plugins[0].ipam.routes[0].gateway") in [(s, p) for s, p, _ in said]


@pytest.mark.parametrize(
    ("subnet", "message"),
    [
        ("10.1.0.0/33", "invalid CIDR address: 10.1.0.0/33"),
        ("banana", "invalid CIDR address: banana"),
    ],
)
def test_values_add_refuses_are_errors(subnet: str, message: str) -> None:
    doc = _chain({"type": "bridge", "ipam": {"type": "host-local", "subnet": subnet}})
    findings = _findings(doc)
    assert _said(findings) == [("error", "plugins[0].ipam", f"ADD would fail: {message}")]
    assert config_check.exit_code(findings) == 1


@pytest.mark.parametrize(
    ("plugin", "needle"),
    [
        ({"type": "bridge", "mtu": 70000}, "invalid MTU 70000"),
        ({"type": "macvlan", "mode": "bridgee"}, "bridgee"),
        ({"type": "bridge", "vlan": 5000}, "invalid VLAN ID 5000"),
        ({"type": "tuning", "mtu": "x"}, "mtu"),
        ({"type": "bandwidth", "ingressRate": -1}, "ingressRate"),
        ({"type": "portmap", "backend": "bpf"}, "backend"),
        ({"type": "firewall", "backend": "pf"}, "backend"),
    ],
)
def test_each_plugin_is_decoded_as_its_add_decodes_it(plugin: dict[str, Any], needle: str) -> None:
    doc = _chain(_bridge(), plugin) if plugin["type"] != "bridge" else _chain(_bridge(**plugin))
    errors = [f for f in _findings(doc) if f.severity == "error"]
    assert len(errors) == 1 and needle in errors[0].message, errors


def test_chains_that_cannot_work() -> None:
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    first = _said(_findings(_chain(portmap, _bridge())))
    assert first[0][:2] == ("error", "plugins[0].type")
    assert "nothing before it" in first[0][2]
    unaddressed = _said(_findings(_chain({"type": "bridge"}, portmap)))
    assert unaddressed[0][:2] == ("warning", "plugins[1].type")
    assert "no plugin before it has an `ipam`" in unaddressed[0][2]
    ipam_as_step = _said(_findings(_chain({"type": "host-local"})))
    assert ipam_as_step[0][:2] == ("warning", "plugins[0].type")


def test_capabilities_nobody_supplies_or_reads() -> None:
    doc = _chain(
        {**_bridge(), "capabilities": {"portMappings": True}},
        {"type": "portmap", "capabilities": {"portMapping": True}},
    )
    said = _said(_findings(doc))
    assert said == [
        (
            "warning",
            "plugins[0].capabilities.portMappings",
            "bridge never reads runtimeConfig.portMappings: the runtime's value would be ignored"
            " (read by portmap)",
        ),
        (
            "warning",
            "plugins[1].capabilities.portMapping",
            "no runtime supplies capability `portMapping`; did you mean `portMappings`?",
        ),
    ]
    assert config_check.exit_code(_findings(doc)) == 2


def test_unknown_plugin_types() -> None:
    said = _said(_findings(_chain(_bridge(), {"type": "brigde"})))
    assert said == [("error", "plugins[1].type", "no plugin `brigde`; did you mean `bridge`?")]
    conf = conf_list_from_bytes(json.dumps(_chain({"type": "my-own", "anything": 1})).encode())
    assert config_check.check_network(conf, "f", plugin_found=lambda t: t == "my-own") == []


def _doc_conflists() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for block in re.findall(r"```(?:json|sh|text)?\n(.*?)```", text, re.S):
            start = block.find('{\n  "cniVersion"')
            if start < 0:
                continue
            try:
                doc = json.loads(block[start : block.index("\n}", start) + 2])
            except ValueError:
                continue
            if isinstance(doc, dict) and "plugins" in doc:
                found.append((page.name, doc))
    return found


def test_the_docs_conflists_raise_nothing() -> None:
    conflists = _doc_conflists()
    assert len(conflists) >= 3
    for page, doc in conflists:
        assert [str(f) for f in _findings(doc)] == [], page


def test_podman_and_containerd_defaults_raise_nothing() -> None:
    from tests.integration.test_podman_conflist import PODMAN_DEFAULT

    podman = json.loads(json.dumps(PODMAN_DEFAULT))
    assert _findings(podman) == []
    containerd = _chain(
        {
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": True,
            "ipMasq": True,
            "promiscMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.88.0.0/16"}], [{"subnet": "2001:4860:4860::/64"}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            },
        },
        {"type": "portmap", "capabilities": {"portMappings": True}},
    )
    assert _findings(containerd) == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)


@given(
    kind=st.sampled_from(["bridge", "ptp", "macvlan", "host-local", "portmap", "tuning", "x"]),
    extra=st.dictionaries(st.text(max_size=12), _JSON, max_size=5),
)
def test_any_config_gets_findings_never_an_exception(kind: str, extra: dict[str, Any]) -> None:
    plugin = {**extra, "type": kind}
    findings = _findings(_chain(_bridge(), plugin))
    assert config_check.exit_code(findings) in (0, 1, 2)
    assert all(f.severity in ("error", "warning") for f in findings)
    assert all(f.path.isprintable() and f.message.isprintable() for f in findings)
    assert all(len(f.path) <= 300 and len(f.message) <= 300 for f in findings)


def test_a_hostile_key_cannot_fake_report_lines() -> None:
    key = "x\n  error: plugins[9]: forged\x1b[2J" + "k" * (10 << 20)
    [finding] = _findings(_chain({**_bridge(), key: 1}))
    assert "\n" not in finding.path + finding.message and "\x1b" not in finding.message
    assert finding.message.startswith("unknown key `x\\n  error: plugins[9]: forged\\x1b[2J")
    assert len(finding.message) <= 300


def test_cli_exit_codes_and_a_broken_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "bridge"
    fake.write_text('#!/bin/sh\necho \'{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}\'\n')
    fake.chmod(0o755)
    confdir = tmp_path / "net.d"
    confdir.mkdir()
    (confdir / "10-good.conflist").write_text(json.dumps({**_chain(_bridge()), "name": "good"}))
    warn = _chain({**_bridge(), "isGatway": True})
    (confdir / "20-warn.conflist").write_text(json.dumps({**warn, "name": "warn"}))
    bad = _chain({"type": "bridge", "ipam": {"type": "host-local", "subnet": "banana"}})
    (confdir / "30-bad.conflist").write_text(json.dumps({**bad, "name": "bad"}))
    (confdir / "05-broken.conflist").write_text('{"cniVersion": "1.0.0", "name": "bro')
    monkeypatch.setenv("NETCONFPATH", str(confdir))
    monkeypatch.setenv("CNI_PATH", str(bindir))
    assert main(["validate", "good"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("10-good.conflist: ok")
    assert main(["validate", "warn"]) == 2
    assert "did you mean `isGateway`?" in capsys.readouterr().out
    assert main(["validate", "bad"]) == 1
    assert "ADD would fail: invalid CIDR address: banana" in capsys.readouterr().out
    assert main(["validate"]) == 1  # every file: the broken one is named
    out = capsys.readouterr().out
    assert f"{confdir / '05-broken.conflist'}: error: cannot be parsed" in out
    assert main(["validate", "nosuch"]) == 1
    assert "unreadable here: 05-broken.conflist" in capsys.readouterr().err


def test_what_a_capability_supplies_is_not_missing() -> None:
    """host-local with no ranges is broken, unless the runtime supplies ipRanges."""
    bare = {"type": "bridge", "ipam": {"type": "host-local"}}
    assert _said(_findings(_chain(bare))) == [
        ("error", "plugins[0].ipam", "ADD would fail: no IP ranges specified")
    ]
    assert _findings(_chain({**bare, "capabilities": {"ipRanges": True}})) == []
