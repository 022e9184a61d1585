"""The reply a worker writes itself (daemon/worker.py): whole, finished by the main thread when
the socket does not take it at once, and an ADD is undone only when its reply reached nobody.

The daemon runs in this test process (its main loop on a thread) with a runner instead of a
plugin; replies of several MiB are larger than a unix socket's send buffer, so the worker's
one send cannot take them whole.
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
from tests.integration.daemon_proc import Out

pytestmark = pytest.mark.kernel

BIG = 4 << 20  # bytes of stdout: far more than a socket's send buffer


class Recorder:
    """A runner that records each call and answers with a result padded to ``PAD`` bytes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(
        self, plugin_type: str, env: Mapping[str, str], stdin: bytes, *, netns_fd: int | None
    ) -> Out:
        with self.lock:
            self.calls.append((env.get("CNI_CONTAINERID", ""), env.get("CNI_COMMAND", "")))
        pad = "x" * int(env.get("PAD", "0"))
        return Out(json.dumps({"cniVersion": "1.0.0", "ips": [], "pad": pad}).encode() + b"\n")

    def commands(self, cid: str) -> list[str]:
        with self.lock:
            return [cmd for c, cmd in self.calls if c == cid]


@pytest.fixture
def served() -> Iterator[tuple[str, Recorder, Daemon]]:
    directory = Path(tempfile.mkdtemp(prefix="pycni-wr"))
    sock = str(directory / "d.sock")
    runner = Recorder()
    daemon = Daemon(sock, runner=runner, workers=2)
    daemon.plugins = {"rec": "ok"}
    daemon.bind()
    thread = threading.Thread(target=daemon.serve_forever, kwargs={"install_signals": False})
    thread.start()
    try:
        yield sock, runner, daemon
    finally:
        daemon.stop()
        thread.join(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)


def send(sock_path: str, cid: str, command: str = "ADD", **env: str) -> socket.socket:
    data = protocol.encode_request(
        protocol.KIND_CALL, "rec", {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, **env},
        b'{"cniVersion": "1.0.0", "name": "n"}', flags=protocol.FLAG_CALLER_NETNS,
    )  # fmt: skip
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    conn.connect(sock_path)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, own.to_bytes(4, "little"))])
    finally:
        os.close(own)
    return conn


def read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(1 << 20):
        data += chunk
    conn.close()
    return data


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_reply_larger_than_the_socket_buffer_arrives_whole(served: Any) -> None:
    sock, runner, _daemon = served
    conn = send(sock, "big", PAD=str(BIG))
    wait_until(lambda: runner.commands("big") == ["ADD"])  # not read yet: the buffer fills
    data = read_all(conn)
    head = protocol.parse_reply_header(data[:20])
    assert head.exit_code == 0 and len(data) == 20 + head.stdout_len + head.stderr_len
    assert len(json.loads(data[20 : 20 + head.stdout_len])["pad"]) == BIG
    stats = client.stats(sock)
    assert stats["counts"]["rolled_back"] == 0
    assert runner.commands("big") == ["ADD"]


def test_a_caller_gone_in_the_middle_of_a_large_reply_has_its_add_undone(served: Any) -> None:
    sock, runner, _daemon = served
    conn = send(sock, "cut", PAD=str(BIG))
    assert len(conn.recv(20)) > 0  # the first bytes came, then the caller leaves
    conn.close()
    wait_until(lambda: runner.commands("cut") == ["ADD", "DEL"])
    wait_until(lambda: client.stats(sock)["counts"]["rolled_back"] == 1)


def read_reply_and_leave(conn: socket.socket) -> int:
    """Read exactly one reply, then hang up (without waiting for the daemon to close)."""
    data = b""
    while len(data) < 20:
        data += conn.recv(20 - len(data))
    head = protocol.parse_reply_header(data[:20])
    rest = head.stdout_len + head.stderr_len
    while len(data) < 20 + rest:
        data += conn.recv(20 + rest - len(data))
    conn.close()
    return head.exit_code


def test_a_delivered_add_whose_caller_leaves_before_the_worker_is_done_is_not_undone(
    served: Any,
) -> None:
    sock, runner, daemon = served
    runner_side = daemon._table.runner
    post = runner_side._post

    def late_post(kind: str, call: Any) -> None:
        """Post "done" only once the main thread has seen the caller hang up (bounded)."""
        deadline = time.monotonic() + 5
        while kind == "done" and call.sock is not None and time.monotonic() < deadline:
            time.sleep(0.001)
        post(kind, call)

    runner_side._post = late_post
    for k in range(10):
        assert read_reply_and_leave(send(sock, f"d{k}")) == 0
    # a call is counted when it is finished, and one with an undo only after the undo ran
    wait_until(lambda: client.stats(sock)["counts"]["calls"] >= 10)
    assert all(runner.commands(f"d{k}") == ["ADD"] for k in range(10))
    assert client.stats(sock)["counts"]["rolled_back"] == 0
