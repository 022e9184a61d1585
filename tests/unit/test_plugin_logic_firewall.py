"""The firewall plugin's iptables verbs through skel, on a stateful filter table: no root.

test_nft_model.py's goldens fix the text each backend sends; this module runs the plugin's
verbs against a small in-memory iptables (``FilterTables``: iptables-restore's -N/-X/-A/-I/-D
applied all-or-nothing per script, iptables-save rendering them back) so what a sequence of
calls *leaves* can be compared: ADD then CHECK, DEL then CHECK, GC, and a failure injected at
each step (PYCNI_TEST_FAIL_AT) leaving the tables and the data directory (the fake host's
FakeStateFiles) as they were. The nftables transport is tests/unit/nft_transport.py's
Recorder (DEL also cleans nftables).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.net.netfilter import iptables
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import CONTAINER_ID, POD, call, recording_steps, with_prev
from tests.unit.nft_transport import Recorder

BUILTIN = ("INPUT", "FORWARD", "OUTPUT")


def prev(v4: str = "10.22.0.5", v6: str = "fd22::5") -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
        "ips": [
            {"address": f"{v4}/16", "interface": 1},
            {"address": f"{v6}/64", "interface": 1},
        ],
    }


class FilterTables:
    """The filter table of each family: chain -> rule texts (as iptables-save prints them)."""

    def __init__(self) -> None:
        self.tables: dict[int, dict[str, list[str]]] = {}
        self.reset()

    def reset(self) -> None:
        self.tables = {family: {chain: [] for chain in BUILTIN} for family in (4, 6)}

    def snapshot(self) -> dict[int, dict[str, list[str]]]:
        return {f: {c: list(r) for c, r in t.items()} for f, t in self.tables.items()}

    def save(self, table: str, family: int = 4, variant: str | None = None) -> Any:
        assert table == "filter"
        chains = self.tables[family]
        lines = ["*filter"]
        lines += [f":{c} {'ACCEPT' if c in BUILTIN else '-'} [0:0]" for c in chains]
        lines += [f"-A {c} {rule}" for c, rules in chains.items() for rule in rules]
        return iptables.parse_save("\n".join([*lines, "COMMIT", ""]), table)

    def restore(self, script: str, family: int = 4, variant: str | None = None) -> None:
        lines = script.splitlines()
        assert lines[0] == "*filter" and lines[-1] == "COMMIT", script
        chains = {c: list(r) for c, r in self.tables[family].items()}
        for line in lines[1:-1]:
            if line.startswith(":"):
                chains.setdefault(line[1:].split()[0], [])
                continue
            op, chain = shlex.split(line)[:2]
            text = line.split(" ", 2)[2] if line.count(" ") >= 2 else ""  # as written
            if op == "-N":
                if chain in chains:
                    raise iptables.IptablesError(f"Chain already exists: {chain}")
                chains[chain] = []
            elif op == "-X":
                if chains.get(chain) or any(
                    f"-j {chain}" in r for rs in chains.values() for r in rs
                ):
                    raise iptables.IptablesError(f"Directory not empty: {chain}")
                chains.pop(chain)
            elif op == "-A":
                chains[chain].append(text)
            elif op == "-I":
                position, text = text.split(" ", 1)
                chains[chain].insert(int(position) - 1, text)
            elif op == "-D":
                if text not in chains.get(chain, []):
                    raise iptables.IptablesError(f"Bad rule: {line}")
                chains[chain].remove(text)
            else:
                raise AssertionError(line)
        self.tables[family] = chains  # all or nothing, as iptables-restore commits


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[FilterTables]:
    Recorder().install(monkeypatch)  # nftables (DEL cleans it too) and tool lookups
    fake = FilterTables()
    monkeypatch.setattr(iptables, "save", fake.save)
    monkeypatch.setattr(iptables, "restore", fake.restore)
    yield fake


def conf(tmp_path: Path, result: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    config = {
        "cniVersion": "1.1.0",
        "name": "fwnet",
        "type": "firewall",
        "backend": "iptables",
        "dataDir": str(tmp_path),
        **extra,
    }
    return with_prev(config, result) if result is not None else config


def files(host: FakeHost, root: Path) -> list[str]:
    """Every file and directory the plugin keeps under ``root`` (in the fake host's files)."""
    state, prefix = host.files, f"{root}/"
    return sorted(p[len(prefix) :] for p in (*state.files, *state.dirs) if p.startswith(prefix))


def run(
    host: FakeHost, command: str, config: dict[str, Any], cid: str = "", fail_at: str = ""
) -> tuple[int, Any]:
    extra = {"CNI_CONTAINERID": cid} if cid else {}
    return call(host, "firewall", command, config, fail_at=fail_at, extra_env=extra)


def host() -> FakeHost:
    fake = FakeHost()
    fake.add_pod(POD)
    return fake


def test_add_check_del_check(tables: FilterTables, tmp_path: Path) -> None:
    fake = host()
    assert run(fake, "ADD", conf(tmp_path, prev()))[0] == 0
    forward = tables.tables[4]["CNI-FORWARD"]
    assert "-s 10.22.0.5/32 -j ACCEPT" in forward
    assert "-s fd22::5/128 -j ACCEPT" in tables.tables[6]["CNI-FORWARD"]
    assert files(fake, tmp_path) == ["fwnet", f"fwnet/{CONTAINER_ID}_eth0"]  # a record, for GC
    record = fake.files.read(f"{tmp_path}/fwnet/{CONTAINER_ID}_eth0")
    assert json.loads(record) == {
        "containerID": CONTAINER_ID,
        "ifname": "eth0",
        "ips": ["10.22.0.5", "fd22::5"],
    }
    assert run(fake, "CHECK", conf(tmp_path, prev()))[0] == 0
    assert run(fake, "DEL", conf(tmp_path, prev()))[0] == 0
    assert not [r for t in tables.tables.values() for r in t["CNI-FORWARD"] if "10.22" in r]
    code, reply = run(fake, "CHECK", conf(tmp_path, prev()))
    assert code == 1 and "not found" in reply["msg"], reply
    assert run(fake, "DEL", conf(tmp_path, prev()))[0] == 0  # again: nothing to remove
    assert files(fake, tmp_path) == []  # the record and its emptied directory went


def test_gc_removes_only_the_rules_of_invalid_attachments(
    tables: FilterTables, tmp_path: Path
) -> None:
    fake = host()
    assert run(fake, "ADD", conf(tmp_path, prev()), cid="keep")[0] == 0
    assert run(fake, "ADD", conf(tmp_path, prev("10.22.0.6", "fd22::6")), cid="gone")[0] == 0
    gc = conf(tmp_path)
    gc["cni.dev/valid-attachments"] = [{"containerID": "keep", "ifname": "eth0"}]
    assert run(fake, "GC", gc)[0] == 0
    rules = [r for t in tables.tables.values() for r in t["CNI-FORWARD"]]
    assert any("10.22.0.5" in r for r in rules) and any("fd22::5" in r for r in rules)
    assert not any("10.22.0.6" in r or "fd22::6" in r for r in rules)
    assert files(fake, tmp_path) == ["fwnet", "fwnet/keep_eth0"]  # gone's record went too
    assert run(fake, "CHECK", conf(tmp_path, prev()), cid="keep")[0] == 0


@pytest.mark.parametrize("first", [True, False], ids=["fresh", "beside-another-pod"])
def test_a_failure_at_each_step_leaves_tables_and_records_as_they_were(
    tables: FilterTables, tmp_path: Path, first: bool
) -> None:
    fake = host()
    if not first:
        assert run(fake, "ADD", conf(tmp_path, prev("10.22.0.9", "fd22::9")), cid="other")[0] == 0
    with recording_steps() as steps:
        assert run(fake, "ADD", conf(tmp_path, prev()))[0] == 0
    assert steps == ["iptables4", "iptables6", "record"]
    assert run(fake, "DEL", conf(tmp_path, prev()))[0] == 0
    if first:  # DEL keeps the chains and jumps (as the reference): start from none
        tables.reset()
    before, before_files = tables.snapshot(), files(fake, tmp_path)
    for step in steps:
        code, reply = run(fake, "ADD", conf(tmp_path, prev()), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        assert tables.snapshot() == before, step
        assert files(fake, tmp_path) == before_files, step
