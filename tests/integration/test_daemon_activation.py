"""Socket activation: systemd (here systemd-socket-activate) listens, the first call starts
the daemon with the listening socket (LISTEN_FDS/LISTEN_PID) and is served by it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycni.daemon import client
from pycni.entrypoints import install

pytestmark = pytest.mark.kernel


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pycni-a"))  # 0700, root's
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("form", ["c", "python"])
def test_first_call_starts_the_daemon_and_is_served(form: str, run_dir: Path) -> None:
    if shutil.which("systemd-socket-activate") is None:
        pytest.fail("systemd-socket-activate missing: scripts/setup-system.sh installs systemd")
    sock = str(run_dir / "d.sock")
    log = run_dir / "daemon.log"
    with open(log, "ab") as out:
        activator = subprocess.Popen(
            ["systemd-socket-activate", "-l", sock, "--", sys.executable, "-m",
             "pycni.cli.daemon_cmd", "--socket", sock, "--workers", "2"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            assert time.monotonic() < deadline and activator.poll() is None, log.read_text()
            time.sleep(0.05)
        assert b"pycni daemon serving" not in log.read_bytes()  # nothing started yet
        install.install(run_dir / form, socket_path=sock, form=form, names=["loopback"])
        env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        proc = subprocess.run(
            [str(run_dir / form / "loopback")], env=env, capture_output=True, timeout=120
        )
        assert proc.returncode == 0, (proc, log.read_text())
        assert "1.0.0" in json.loads(proc.stdout)["supportedVersions"]
        health = client.ping(sock, timeout=10)
        assert health["socketActivated"] is True
        assert health["pid"] == activator.pid  # the activator exec'd the daemon
        assert client.stats(sock)["counts"]["calls"] >= 1  # the first call went through it
    finally:
        if activator.poll() is None:
            activator.send_signal(signal.SIGTERM)
        assert activator.wait(timeout=60) == 0, log.read_text()
    assert "(from systemd)" in log.read_text()
