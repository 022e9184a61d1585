"""`pycni demo`: runs end to end, prints every section, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import harness

PYCNI = str(Path(sys.executable).parent / "pycni")
SECTIONS = ("Pods", "Ping matrix", "HTTP through host port", "ADD timings", "Topology")

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def _demo(*argv: str, mode: str = "inprocess") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYCNI, "demo", "--mode", mode, *argv],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _namespaces(prefix: str) -> list[str]:
    return [n for n in os.listdir("/run/netns") if n.startswith(prefix)]


def _servers(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"http.server" in cmdline and marker.encode() in cmdline:
            pids.append(int(pid))
    return pids


def test_demo_runs_checks_and_cleans_up(tmp_path: Path) -> None:
    prefix = f"{harness.RUN_PREFIX}demo{os.getpid() % 1000}-"
    state = tmp_path / "demo"
    proc = _demo("--prefix", prefix, "--state-dir", str(state))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for section in SECTIONS:
        assert f"\n{section}" in out, f"section {section!r} missing:\n{out}"
    assert "0 failed" in out
    assert "HTTP/1.0 200 OK | hello from" in out
    for i in (1, 2, 3):
        assert f"{prefix}pod{i}" in out
    assert "10.88.0." in out and "cni-demo0" in out
    assert "FAIL" not in out
    assert _namespaces(prefix) == []
    assert not state.exists()
    assert _servers(str(state)) == []


def test_demo_keep_then_down(tmp_path: Path) -> None:
    prefix = f"{harness.RUN_PREFIX}keep{os.getpid() % 1000}-"
    state = tmp_path / "kept"
    proc = _demo("--keep", "--prefix", prefix, "--state-dir", str(state))
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "pycni demo --down" in proc.stdout
        saved = json.loads((state / "demo.json").read_text())
        assert sorted(_namespaces(prefix)) == sorted(saved["created"])
        assert len(saved["created"]) == 5
        assert _servers(str(state)), "the web server should still run"
        node = harness.Namespace(f"{prefix}node")
        answer = node.run(sys.executable, "-c", _GET, check=False)
        assert "hello from" in answer.stdout, answer.stderr
        again = _demo("--keep", "--prefix", prefix, "--state-dir", str(state))
        assert again.returncode == 2 and "--down" in again.stderr
    finally:
        down = _demo("--down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
    assert _namespaces(prefix) == []
    assert not state.exists()
    assert _servers(str(state)) == []
    nothing = _demo("--down", "--state-dir", str(state))
    assert nothing.returncode == 0 and "nothing to remove" in nothing.stdout


def _processes(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_demo_fast_path_runs_a_daemon_for_the_run_and_compares(tmp_path: Path) -> None:
    from pycni.daemon import client, protocol

    try:
        client.ping(protocol.DEFAULT_SOCKET, timeout=1.0)
        pytest.fail(f"a daemon answers on {protocol.DEFAULT_SOCKET}: this test needs none")
    except (client.DaemonUnavailable, OSError, ValueError):
        pass
    prefix = f"{harness.RUN_PREFIX}fast{os.getpid() % 1000}-"
    state = tmp_path / "fast"
    proc = _demo("--prefix", prefix, "--state-dir", str(state), mode="daemon")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "daemon started for this run: pid " in out and f"on {state}/run/pycni.sock" in out
    assert "3 pods: min " in out and "(mode: daemon, started for this run)" in out
    assert "  1 pod in-process (no daemon, for comparison): " in out
    assert "daemon stopped" in out and "0 failed" in out
    assert _namespaces(prefix) == []  # the comparison pod's too
    assert not state.exists()
    assert _processes(str(state)) == []


_GET = (
    "import urllib.request;"
    "print(urllib.request.urlopen('http://127.0.0.1:8080/', timeout=5).read().decode())"
)
