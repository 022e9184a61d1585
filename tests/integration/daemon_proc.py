"""A real ``pycni daemon`` process on a tmp socket, for the daemon's end-to-end tests
(the fixtures ``short_dir`` and ``daemon`` in tests/conftest.py start one per test)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pycni.daemon import client


@dataclass
class Out:
    """What a stand-in runner of the daemon's call path answers (a plugin run's outcome)."""

    stdout: bytes
    stderr: bytes = b""
    exit_code: int = 0


@dataclass
class DaemonProc:
    socket_path: str
    proc: subprocess.Popen[bytes]
    log: Path

    def calls(self) -> int:
        return self.count("calls")

    def count(self, name: str, at_least: int = 0) -> int:
        """A counter; waits up to 20 s for ``at_least`` (a call is counted just after its reply)."""
        deadline = time.monotonic() + 20
        while True:
            value = int(client.stats(self.socket_path)["counts"][name])
            if value >= at_least or time.monotonic() > deadline:
                return value
            time.sleep(0.02)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def start_daemon(
    directory: Path,
    *extra: str,
    netns: str | None = None,
    preexec: Callable[[], None] | None = None,
) -> DaemonProc:
    """A daemon on ``directory``/run/d.sock logging to ``directory``/daemon.log, with 4
    workers unless ``extra`` says otherwise; in network namespace ``netns`` (a path) if given.
    Returns once it answers a ping."""
    sock = str(directory / "run" / "d.sock")
    log = directory / "daemon.log"
    enter = ["nsenter", f"--net={netns}", "--"] if netns else []
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*enter, sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", sock,
             "--workers", "4", *extra],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            client.ping(sock)
            return DaemonProc(sock, proc, log)
        except (client.DaemonUnavailable, OSError):
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"daemon did not come up:\n{log.read_text()}")
