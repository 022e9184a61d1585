"""The daemon's bounds and deadlines, with a runner that records what it was asked to run.

The daemon runs in this test process (its main loop on a thread) with a runner instead of a
plugin, so each policy — queue bounds, callers that leave, call deadlines, the rollback of
an ADD nobody received — is checked on its own, deterministically.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pycni.daemon import client, protocol
from pycni.daemon.server import Daemon
from pycni.spec.errors import INTERNAL, TRY_AGAIN_LATER
from tests.integration.daemon_proc import Out

pytestmark = pytest.mark.kernel


class Recorder:
    """A runner: sleeps ``SLEEP`` seconds (uninterruptibly), records each call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(
        self, plugin_type: str, env: Mapping[str, str], stdin: bytes, *, netns_fd: int | None
    ) -> Out:
        entry = {"cid": env.get("CNI_CONTAINERID"), "cmd": env.get("CNI_COMMAND")}
        entry["config"] = json.loads(stdin) if stdin else {}
        with self.lock:
            self.calls.append(entry)
        time.sleep(float(env.get("SLEEP", "0")))
        return Out(b'{"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]}\n')

    def commands(self, cid: str) -> list[str]:
        with self.lock:
            return [c["cmd"] for c in self.calls if c["cid"] == cid]


@pytest.fixture
def make_daemon() -> Iterator[Any]:
    started: list[tuple[Daemon, threading.Thread, Path]] = []

    def make(**kw: Any) -> tuple[Daemon, str, Recorder]:
        directory = Path(tempfile.mkdtemp(prefix="pycni-l"))
        sock = str(directory / "d.sock")
        runner = Recorder()
        daemon = Daemon(sock, runner=runner, **kw)
        daemon.plugins = {"rec": "ok"}
        daemon.bind()
        thread = threading.Thread(target=daemon.serve_forever, kwargs={"install_signals": False})
        thread.start()
        started.append((daemon, thread, directory))
        return daemon, sock, runner

    try:
        yield make
    finally:
        for daemon, thread, directory in started:
            daemon.stop()
            thread.join(timeout=30)
            shutil.rmtree(directory, ignore_errors=True)


def request(cid: str, command: str = "ADD", **env: str) -> bytes:
    return protocol.encode_request(
        protocol.KIND_CALL, "rec", {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, **env},
        b'{"cniVersion": "1.0.0", "name": "n"}', flags=protocol.FLAG_CALLER_NETNS,
    )  # fmt: skip


def send(sock_path: str, data: bytes) -> socket.socket:
    """Send a call (with this process's netns as the caller's) and return the open socket."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    conn.connect(sock_path)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, own.to_bytes(4, "little"))])
    finally:
        os.close(own)
    return conn


def read_reply(conn: socket.socket) -> tuple[int, dict[str, Any]]:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    head = protocol.parse_reply_header(data[:20])
    code, out_len = head.exit_code, head.stdout_len
    return code, json.loads(data[20 : 20 + out_len])


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_full_container_queue_is_try_again_later_at_once(make_daemon: Any) -> None:
    _daemon, sock, runner = make_daemon(workers=2, max_per_container=2, max_queued=3)
    # the first call runs 3 s: long enough, on a loaded machine, for every check below to
    # happen while it still holds its place
    first = send(sock, request("c1", SLEEP="3"))
    wait_until(lambda: runner.commands("c1") == ["ADD"])
    second = send(sock, request("c1"))  # waits behind the first
    code, err = read_reply(send(sock, request("c1")))  # a third for c1: over the bound
    assert runner.commands("c1") == ["ADD"]  # answered at once: the second has not run yet
    assert code == 1 and err["code"] == TRY_AGAIN_LATER and "queue full" in err["msg"]
    third = send(sock, request("c2", SLEEP="3"))  # another container: admitted (3 in total)
    wait_until(lambda: runner.commands("c2") == ["ADD"])
    code, err = read_reply(send(sock, request("c3")))  # over the total bound
    assert err["code"] == TRY_AGAIN_LATER and "in total" in err["msg"]
    for conn in (first, second, third):
        assert read_reply(conn)[0] == 0
    assert runner.commands("c1") == ["ADD", "ADD"]
    assert client.stats(sock)["counts"]["busy"] == 2


def test_queued_call_whose_caller_left_is_dropped(make_daemon: Any) -> None:
    _daemon, sock, runner = make_daemon(workers=2)
    first = send(sock, request("c1", SLEEP="1.0"))
    wait_until(lambda: runner.commands("c1") == ["ADD"])
    send(sock, request("c1", "DEL")).close()  # queued behind the first, then gone
    wait_until(lambda: client.stats(sock)["counts"]["dropped"] == 1)
    assert read_reply(first)[0] == 0
    time.sleep(0.3)
    assert runner.commands("c1") == ["ADD"]  # the DEL never ran


def test_add_finished_for_a_caller_that_left_is_rolled_back(make_daemon: Any) -> None:
    _daemon, sock, runner = make_daemon(workers=2)
    conn = send(sock, request("c1", SLEEP="1.0"))
    wait_until(lambda: runner.commands("c1") == ["ADD"])
    conn.close()  # gone while the (uninterruptible) ADD runs
    wait_until(lambda: runner.commands("c1") == ["ADD", "DEL"])
    undo = runner.calls[-1]["config"]
    assert undo["prevResult"]["ips"] == [{"address": "10.1.2.3/24"}]
    wait_until(lambda: client.stats(sock)["counts"]["rolled_back"] == 1)


def test_call_past_its_deadline_is_answered_and_rolled_back(make_daemon: Any) -> None:
    daemon, sock, runner = make_daemon(workers=1, call_timeout=1.0, cancel_grace=0.3)
    started = time.monotonic()
    hung = send(sock, request("c1", SLEEP="5"))
    code, err = read_reply(hung)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 4.0, elapsed  # the deadline + grace (1.3 s), not the 5 s call
    assert code == 1 and err["code"] == INTERNAL and "deadline of 1s" in err["msg"]
    # The only worker is still held by the hung call: the pool lent another one.
    assert read_reply(send(sock, request("c2")))[0] == 0
    assert runner.commands("c1") == ["ADD"]  # served while the hung ADD still runs
    # When the hung ADD finally returns, its result reaches nobody: it is rolled back.
    wait_until(lambda: runner.commands("c1") == ["ADD", "DEL"])
    wait_until(lambda: daemon.health()["workers"] == 1)  # the lent thread went away
    counts = client.stats(sock)["counts"]
    assert counts["timed_out"] == 1 and counts["rolled_back"] == 1


def test_call_waiting_past_its_deadline_is_try_again_later(make_daemon: Any) -> None:
    _daemon, sock, runner = make_daemon(workers=2, call_timeout=1.0, cancel_grace=5.0)
    first = send(sock, request("c1", SLEEP="2.5"))
    wait_until(lambda: runner.commands("c1") == ["ADD"])
    code, err = read_reply(send(sock, request("c1", "DEL")))
    assert code == 1 and err["code"] == TRY_AGAIN_LATER and "was not run" in err["msg"]
    read_reply(first)
    assert runner.commands("c1") == ["ADD"]


def test_incomplete_request_gets_an_error_at_the_total_deadline(make_daemon: Any) -> None:
    _daemon, sock, _runner = make_daemon(workers=1, recv_timeout=1.0)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(sock)
    data = request("c1")
    started = time.monotonic()
    for byte in data[:20]:  # a byte every 0.3 s: every read is quick, the whole is too slow
        try:
            conn.send(bytes([byte]))
        except BrokenPipeError:
            break  # answered and closed at the deadline
        time.sleep(0.3)
    code, err = read_reply(conn)
    assert code == 1 and "incomplete request after 1 s" in err["details"]
    assert time.monotonic() - started < 4.5  # not the 6 s of trickling
