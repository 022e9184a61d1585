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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pycni.daemon import client, protocol
from pycni.daemon.server import Daemon

pytestmark = pytest.mark.kernel

BIG = 4 << 20  # bytes of stdout: far more than a socket's send buffer


@dataclass
class Out:
    stdout: bytes
    stderr: bytes = b""
    exit_code: int = 0


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
def served() -> Iterator[tuple[str, Recorder]]:
    directory = Path(tempfile.mkdtemp(prefix="pycni-wr"))
    sock = str(directory / "d.sock")
    runner = Recorder()
    daemon = Daemon(sock, runner=runner, workers=2)
    daemon.plugins = {"rec": "ok"}
    daemon.bind()
    thread = threading.Thread(target=daemon.serve_forever, kwargs={"install_signals": False})
    thread.start()
    try:
        yield sock, runner
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
    sock, runner = served
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
    sock, runner = served
    conn = send(sock, "cut", PAD=str(BIG))
    assert len(conn.recv(20)) > 0  # the first bytes came, then the caller leaves
    conn.close()
    wait_until(lambda: runner.commands("cut") == ["ADD", "DEL"])
    wait_until(lambda: client.stats(sock)["counts"]["rolled_back"] == 1)


def test_delivered_adds_whose_callers_leave_at_once_are_not_undone(served: Any) -> None:
    sock, runner = served
    for k in range(30):  # the hang-up races the worker's "done": never an undo either way
        data = read_all(send(sock, f"d{k}"))
        assert protocol.parse_reply_header(data[:20]).exit_code == 0
    # a call is counted when it is finished, and one with an undo only after the undo ran
    wait_until(lambda: client.stats(sock)["counts"]["calls"] >= 30)
    assert all(runner.commands(f"d{k}") == ["ADD"] for k in range(30))
    assert client.stats(sock)["counts"]["rolled_back"] == 0
