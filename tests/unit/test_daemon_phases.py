"""pycni.daemon.phases' bookkeeping: exclusive time per phase, counts, install and uninstall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.daemon import phases, policy
from pycni.daemon.protocol import KIND_CALL, Reply, Request
from pycni.runtime.exec import CallControl
from pycni.skel import run as skel


class FakeClock:
    """A clock that advances only when told (ns)."""

    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def test_nested_phases_are_booked_exclusive_of_their_children() -> None:
    clock = FakeClock()
    ledger = phases.Ledger({"plugin": "bridge"}, clock=clock)
    clock.now += 1_000_000  # 1 ms in "call" itself
    ledger.enter("plugin:Bridge")
    clock.now += 2_000_000
    ledger.enter("netlink")
    clock.now += 3_000_000
    ledger.count("netlink-reads", 2)
    ledger.leave()
    ledger.enter("netlink")
    clock.now += 500_000
    ledger.leave()
    ledger.leave()
    clock.now += 250_000
    rec = ledger.close()
    assert rec["plugin"] == "bridge"
    assert rec["phasesMs"] == {"netlink": 3.5, "plugin:Bridge": 2.0, "call": 1.25}
    assert rec["counts"] == {"call": 1, "plugin:Bridge": 1, "netlink": 2, "netlink-reads": 2}
    assert rec["totalMs"] == pytest.approx(sum(rec["phasesMs"].values()))


def test_close_ends_phases_an_exception_left_open() -> None:
    clock = FakeClock()
    ledger = phases.Ledger({}, clock=clock)
    ledger.enter("fsync")
    clock.now += 4_000_000
    rec = ledger.close()  # the wrapper's finally never ran: still booked, nothing lost
    assert rec["phasesMs"] == {"fsync": 4.0, "call": 0.0}
    assert rec["totalMs"] == 4.0


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "phases.jsonl"
    original = (policy.execute, os.fsync, skel._parse_config)
    phases.install(str(out))
    try:
        yield out
    finally:
        phases.uninstall()
        assert (policy.execute, os.fsync, skel._parse_config) == original


def test_an_installed_call_writes_one_line_with_its_phases(installed: Path, tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"x")

    def runner(plugin_type: str, env: dict[str, str], stdin: bytes, **_: Any) -> Any:
        skel._parse_config(stdin)
        with target.open("rb") as handle:
            os.fsync(handle.fileno())
            os.fsync(handle.fileno())
        return Reply(0, b"{}", b"")

    fd = os.open("/proc/self/ns/net", os.O_RDONLY)  # our own namespace: setns changes nothing
    try:
        req = Request(
            KIND_CALL,
            "bridge",
            {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1"},
            b'{"cniVersion":"1.0.0","name":"n","type":"bridge"}',
            caller_netns_fd=fd,
        )
        with target.open("rb") as handle:
            os.fsync(handle.fileno())  # outside a call: not booked
        reply = policy.execute(runner, req, CallControl(5.0), fd)
    finally:
        os.close(fd)
    assert reply.exit_code == 0
    (line,) = installed.read_text().splitlines()
    rec = json.loads(line)
    assert (rec["plugin"], rec["command"], rec["containerId"]) == ("bridge", "ADD", "c1")
    assert rec["counts"]["fsync"] == 2
    assert rec["counts"]["decode"] == 1
    assert rec["counts"]["setns"] == 2  # into the caller's namespace and back home
    assert set(rec["phasesMs"]) == {"call", "decode", "fsync", "setns"}
    assert rec["totalMs"] >= sum(rec["phasesMs"].values()) - 1e-6


def test_nothing_is_wrapped_until_installed() -> None:
    assert os.fsync.__module__ == "posix"
    assert policy.execute.__module__ == "pycni.daemon.policy"


def test_the_daemon_never_imports_it() -> None:
    """Off means not even imported: the daemon's and the CLI's modules leave it out."""
    code = (
        "import sys, pycni.cli.main, pycni.cli.daemon_cmd, pycni.daemon.server, "
        "pycni.daemon.worker; "
        "print('pycni.daemon.phases' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
