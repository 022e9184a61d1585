"""FakeProcesses answers as the machine's processes do (pycni.process.real), on one case run
on both: a daemonizing program started detached (a shell leaving ``sleep`` behind, the
harmless stand-in for dnsmasq), looked at, signalled and killed. Rootless."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pycni.process.fake_processes import FakeProcesses
from pycni.process.processes import Finished, Processes
from pycni.process.real import REAL

ENV = {"PATH": "/usr/bin:/bin"}


def outcome(fn: Callable[[], object]) -> object:
    try:
        value = fn()
    except OSError as exc:
        return type(exc).__name__
    return "ok" if value is None else value


def gone_within(procs: Processes, pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while procs.alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def daemon_case(procs: Processes, argv: list[str], read_pid: Callable[[], int]) -> Any:
    finished = procs.run_detached(argv, env=ENV, timeout=10)
    pid = read_pid()
    try:
        seen = (procs.cmdline(pid), procs.alive(pid))
        cont = outcome(lambda: procs.signal(pid, signal.SIGCONT))
        still = procs.alive(pid)
        killed = outcome(lambda: procs.signal(pid, signal.SIGKILL))
        gone = gone_within(procs, pid)
    finally:
        with contextlib.suppress(OSError):
            procs.signal(pid, signal.SIGKILL)
    return (
        finished,
        seen,
        cont,
        still,
        killed,
        gone,
        procs.cmdline(pid) if not isinstance(procs, FakeProcesses) else [],
        outcome(lambda: procs.signal(0, signal.SIGKILL)),
        outcome(lambda: procs.run_detached(["/nonexistent/prog"], env=ENV, timeout=1)),
        procs.which("sh"),
        procs.which("no-such-program-here"),
    )


def test_fake_answers_as_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/bin")
    pid_file = tmp_path / "pid"
    script = f"sleep 30 >/dev/null 2>&1 & echo $! > {pid_file}; echo started"
    real = daemon_case(REAL, ["/bin/sh", "-c", script], lambda: int(pid_file.read_text().strip()))

    fake = FakeProcesses()
    spawned: list[int] = []

    def sh(procs: FakeProcesses, argv: list[str]) -> Finished:
        spawned.append(procs.spawn(["sleep", "30"]))
        return Finished(0, "started")

    fake.install("sh", sh, path="/bin/sh")
    in_memory = daemon_case(fake, ["/bin/sh", "-c", script], lambda: spawned[-1])
    assert in_memory == real
    assert real[1] == (["sleep", "30"], True) and real[5] is True  # the case saw a process
    assert fake.signals == [(spawned[0], signal.SIGCONT), (spawned[0], signal.SIGKILL)]


def test_a_run_that_does_not_finish_is_a_timeout() -> None:
    with pytest.raises(TimeoutError):
        REAL.run_detached(["sleep", "5"], env=ENV, timeout=0.2)


def test_a_zombie_is_not_alive() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while REAL.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not REAL.alive(pid)  # exited, not yet reaped: a zombie
        assert REAL.cmdline(pid) == []
    finally:
        os.waitpid(pid, 0)
    fake = FakeProcesses()
    child = fake.spawn(["dnsmasq"])
    fake.zombie(child)
    assert not fake.alive(child)
