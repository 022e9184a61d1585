"""Golden tests: what portmap's nftables backend, masquerading, the firewall plugin and inspect
send to the kernel (nft text, libnftables JSON, nf_tables netlink bytes, iptables scripts and
argv) for fixed scenarios, compared with what the code sent before the nftables model
(net/netfilter/model.py) existed. The recordings in golden/nft_transport.json were captured
from that code; ``PYCNI_WRITE_GOLDEN=1`` rewrites them (only ever for a deliberate change)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pycni.net.netfilter import model, nft_records
from pycni.spec import jsoncodec
from tests.unit.nft_scenarios import SCENARIOS
from tests.unit.nft_transport import Recorder

GOLDEN = Path(__file__).parent / "golden" / "nft_transport.json"


def _run(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    rec = Recorder()
    result = SCENARIOS[name](rec, str(tmp_path))
    # through JSON, as stored: tuples become lists, keys strings
    return json.loads(json.dumps({"calls": rec.calls, "result": result}, default=str))


def _same_transport(call: list[Any]) -> list[Any]:
    """``nft.apply`` of a JSON document is libnftables' JSON input, as ``nft.apply_json``:
    one form for both, so moving a caller from one to the other is no difference."""
    if call[0] == "nft.text" and call[1].lstrip().startswith("{"):
        return ["nft.json", json.loads(call[1])["nftables"]]
    return call


def _dumps(data: dict[str, Any]) -> str:
    """One call per line, so a changed call is one changed line in a diff."""
    out = ["{"]
    for n, name in enumerate(sorted(data)):
        calls = data[name]["calls"]
        out += [f" {json.dumps(name)}: {{", '  "calls": [']
        out += [
            "   " + json.dumps(c, sort_keys=True) + ("," if i < len(calls) - 1 else "")
            for i, c in enumerate(calls)
        ]
        out += ["  ],", '  "result": ' + json.dumps(data[name]["result"], sort_keys=True)]
        out.append(" }" + ("," if n < len(data) - 1 else ""))
    return "\n".join([*out, "}"]) + "\n"


def _golden() -> dict[str, Any]:
    if not GOLDEN.exists():
        return {}
    data: dict[str, Any] = json.loads(GOLDEN.read_text())
    return data


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_transport_matches_golden(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    got = _run(name, monkeypatch, tmp_path)
    if os.environ.get("PYCNI_WRITE_GOLDEN") == "1":
        data = _golden()
        data[name] = got
        GOLDEN.write_text(_dumps(data))
        return
    want = _golden().get(name)
    assert want is not None, f"no golden recording for {name}"
    assert got["result"] == want["result"]
    assert len(got["calls"]) == len(want["calls"]), [c[0] for c in got["calls"]]
    for index, (mine, theirs) in enumerate(zip(got["calls"], want["calls"], strict=True)):
        assert _same_transport(mine) == _same_transport(theirs), f"call {index} differs"


def test_scenarios_write_something() -> None:
    """Each scenario's recording is not empty: the goldens pin real traffic."""
    data = _golden()
    assert set(data) == set(SCENARIOS)
    quiet = [n for n, v in data.items() if not v["calls"] and not v["result"]]
    assert not quiet


# --- the model itself ----------------------------------------------------------------------------

T = model.Table("inet", "t", "a table")


def test_every_statement_reads_back_as_written() -> None:
    """A rule rendered to JSON and listed back (as ``nft -j list`` gives it) is the same rule."""
    statements: list[model.Statement] = [
        model.Match(model.Payload("ip", "saddr"), model.Prefix("10.0.0.0", 8)),
        model.Match(model.Payload("ip6", "daddr"), model.SetRef("s6"), "!="),
        model.Match(model.Meta("iifname"), "eth*"),
        model.Match(model.Payload("tcp", "dport"), 8080),
        model.Verdict("jump", "c2"),
        model.Verdict("accept"),
        model.Dnat("ip", "10.0.0.2", 80),
        model.Masquerade(),
    ]
    rule = model.Rule(T, "c", statements, "note", 7)
    listed = model.parse([{"rule": {**rule.json(), "handle": 7}}])
    assert listed.rules == [model.Rule(model.Table("inet", "t"), "c", statements, "note", 7)]
    assert listed.rules[0].jumps_to("c2") and not listed.rules[0].jumps_to("c")


def test_commands_name_objects_by_their_ids() -> None:
    chain = model.Chain(T, "fw", "filter", "forward", 0, "accept")
    assert model.add(T) == {"add": {"table": {"family": "inet", "name": "t", "comment": "a table"}}}
    assert model.add(chain)["add"]["chain"] == {
        "family": "inet",
        "table": "t",
        "name": "fw",
        "type": "filter",
        "hook": "forward",
        "prio": 0,
        "policy": "accept",
    }
    assert model.flush(chain) == {
        "flush": {"chain": {"family": "inet", "table": "t", "name": "fw"}}
    }
    assert model.delete(model.Rule(T, "fw", handle=4)) == {
        "delete": {"rule": {"family": "inet", "table": "t", "chain": "fw", "handle": 4}}
    }
    vmap = model.Set(T, "m", ("ipv4_addr", "inet_service"), "verdict")
    element = model.Element(model.Concat(("10.0.0.1", 80)), model.Verdict("goto", "c"), "x")
    assert model.add(vmap, [element])["add"]["element"]["elem"] == [
        [{"elem": {"val": {"concat": ["10.0.0.1", 80]}, "comment": "x"}}, {"goto": {"target": "c"}}]
    ]
    listed = model.parse([{"map": {**vmap.json(), "elem": [element.json()]}}]).sets[0]
    assert listed.kind == "map" and listed.elements == [element] and element.target() == "c"


def test_elements_render_to_the_kernel_form() -> None:
    element = model.Element(
        model.Concat(("192.0.2.1", "tcp", "8080")), model.Concat(("fd00::2", "80"))
    )
    change = element.change("dnat4h", True, "owner", exclusive=True)
    assert change.key == nft_records.concat_key(["192.0.2.1", "tcp", "8080"])
    assert change.data == ipaddress.ip_address("fd00::2").packed + b"\x00\x50\x00\x00"
    assert (change.comment, change.exclusive, change.add) == ("owner", True, True)
    gone = element.change("dnat4h", False, "owner")
    assert (gone.data, gone.comment) == (b"", "")
    read_back = model.Element(change.key)  # an element read over netlink: no JSON form
    assert read_back.change("dnat4h", False).key == change.key
    with pytest.raises(ValueError):
        read_back.json()
    assert model.removal(model.Set(T, "s"), True) == nft_records.Removal(
        "set", "s", only_if_unused=True
    )
    assert model.removal(T) == nft_records.Removal("table", "t")


@given(st.text())
def test_any_value_stays_one_json_string(text: str) -> None:
    """Whatever a name or comment holds, it reaches libnftables as that one JSON string."""
    rule = model.Rule(T, text, [model.Match(model.Meta("iifname"), text)], text)
    document = jsoncodec.loads(jsoncodec.dumps({"nftables": [model.add(rule)]}))
    sent = document["nftables"][0]["add"]["rule"]
    assert sent["chain"] == text and sent.get("comment", "") == text
    assert sent["expr"][0]["match"]["right"] == text


def test_model_import_stays_off_the_cold_path() -> None:
    """Importing the model loads none of what a plugin's cold path must not (json, typing,
    re, dataclasses, the netlink transport)."""
    code = "import sys, pycni.net.netfilter.model; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "pycni.net.netfilter.model" in out
    for banned in ("json", "typing", "re", "dataclasses", "pycni.net.netfilter.nftnl"):
        assert banned not in out, banned


def test_values_are_immutable_and_hashable_objects_are_not() -> None:
    element = model.Element(model.Concat(("tcp", 80)), comment="x")
    with pytest.raises(AttributeError):
        element.comment = "y"  # type: ignore[misc]
    assert {element: 1}[model.Element(model.Concat(("tcp", 80)), comment="x")] == 1
    assert element != model.Element(model.Concat(("tcp", 80)))
    assert repr(model.Meta("mark")) == "Meta(key='mark')"
    rule = model.Rule(T, "c")
    rule.comment = "filled in"  # rules and sets are built up in place
    with pytest.raises(TypeError):
        hash(rule)


def test_inspect_lists_only_plainly_named_portmap_tables() -> None:
    """A table name read from the kernel goes into a ``list table`` command: one that could
    end it (``;``, a space) is not a portmap table, whatever its prefix."""
    from pycni.inspect import nftmap

    listed = [
        {"table": {"family": "inet", "name": "pycni_portmap"}},
        {"table": {"family": "ip", "name": "cni_hostport"}},
        {"table": {"family": "inet", "name": "pycni; flush ruleset"}},
        {"table": {"family": "inet", "name": "pycni x"}},
        {"table": {"family": "netdev", "name": "pycni_portmap"}},
        {"table": {"family": "inet", "name": "filter"}},
    ]
    rec = Recorder()
    rec.answer("nft.query", "list tables", listed)
    assert nftmap.portmap_tables(rec.nf.nft) == [("inet", "pycni_portmap"), ("ip", "cni_hostport")]
