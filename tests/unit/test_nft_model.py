"""Golden tests: what portmap's nftables backend, masquerading, the firewall plugin and inspect
send to the kernel (nft text, libnftables JSON, nf_tables netlink bytes, iptables scripts and
argv) for fixed scenarios, compared with what the code sent before the nftables model
(net/netfilter/model.py) existed. The recordings in golden/nft_transport.json were captured
from that code; ``PYCNI_WRITE_GOLDEN=1`` rewrites them (only ever for a deliberate change)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.nft_scenarios import SCENARIOS
from tests.unit.nft_transport import Recorder

GOLDEN = Path(__file__).parent / "golden" / "nft_transport.json"


def _run(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    rec = Recorder()
    with monkeypatch.context() as patch:
        rec.install(patch)
        result = SCENARIOS[name](rec, str(tmp_path))
    # through JSON, as stored: tuples become lists, keys strings
    return json.loads(json.dumps({"calls": rec.calls, "result": result}, default=str))


def _same_transport(call: list[Any]) -> list[Any]:
    """``nft.apply`` of a JSON document is libnftables' JSON input, as ``nft.apply_json``:
    one form for both, so moving a caller from one to the other is no difference."""
    if call[0] == "nft.text" and call[1].lstrip().startswith("{"):
        return ["nft.json", json.loads(call[1])["nftables"]]
    return call


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
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
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
