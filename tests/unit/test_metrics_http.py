"""The metrics endpoint's HTTP server answers only what it should, within its bounds."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from pycni.daemon.metrics import SharedRender
from pycni.daemon.metrics_http import MAX_REQUEST, MetricsHTTPServer


@pytest.fixture
def server() -> Iterator[MetricsHTTPServer]:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0pycni-metrics-unit-" + os.urandom(4).hex())
    listener.listen(8)
    srv = MetricsHTTPServer(listener, lambda: b"pycni_up 1\n", max_connections=4, deadline=5.0)
    srv.start()
    yield srv
    srv.close()


def ask(srv: MetricsHTTPServer, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(srv.server_address)
        conn.sendall(data)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
    return out


def test_get_head_and_refusals(server: MetricsHTTPServer) -> None:
    got = ask(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.startswith(b"HTTP/1.0 200 OK\r\n") and got.endswith(b"\r\n\r\npycni_up 1\n")
    assert b"Content-Length: 11\r\n" in got
    head = ask(server, b"HEAD / HTTP/1.0\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK") and head.endswith(b"\r\n\r\n")
    assert ask(server, b"POST / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 405")
    assert ask(server, b"\r\n\r\n").startswith(b"HTTP/1.0 405")
    too_big = b"GET / HTTP/1.0\r\nX: " + b"a" * (MAX_REQUEST + 10)
    assert ask(server, too_big).startswith(b"HTTP/1.0 431")
    assert server.open_connections == 0


def test_a_failing_render_is_a_500_and_the_server_keeps_serving() -> None:
    calls = []

    def render() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("collector broke")
        return b"ok 1\n"

    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0pycni-metrics-unit-" + os.urandom(4).hex())
    listener.listen(8)
    srv = MetricsHTTPServer(listener, render)
    srv.start()
    try:
        assert ask(srv, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 500")
        assert ask(srv, b"GET / HTTP/1.0\r\n\r\n").endswith(b"ok 1\n")
    finally:
        srv.close()


def test_the_text_is_rendered_at_most_once_a_second_and_shared() -> None:
    now = [100.0]
    renders: list[int] = []

    def render() -> bytes:
        renders.append(1)
        if len(renders) == 3:
            raise RuntimeError("collector broke")
        return f"pycni_up {len(renders)}\n".encode()

    shared = SharedRender(render, every=1.0, clock=lambda: now[0])
    assert [shared() for _ in range(50)] == [b"pycni_up 1\n"] * 50
    now[0] += 0.999
    assert shared() == b"pycni_up 1\n" and len(renders) == 1
    now[0] += 0.001
    assert shared() == b"pycni_up 2\n" and len(renders) == 2
    now[0] += 1.0
    with pytest.raises(RuntimeError):
        shared()
    assert shared() == b"pycni_up 4\n"  # a failure is not kept: the next scrape renders


def test_scrapers_in_a_loop_are_answered_in_turn_and_share_one_rendering() -> None:
    """Answers are paced (one per min_interval, in arrival order), so scrapers fetching in a
    loop wait instead of spinning, and within a second they all get the same rendering."""
    renders: list[int] = []

    def render() -> bytes:
        renders.append(1)
        return b"pycni_up 1\n"

    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0pycni-metrics-unit-" + os.urandom(4).hex())
    listener.listen(16)
    srv = MetricsHTTPServer(listener, SharedRender(render, every=60.0), min_interval=0.05)
    srv.start()
    try:
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            got = list(pool.map(lambda _: ask(srv, b"GET / HTTP/1.0\r\n\r\n"), range(24)))
        elapsed = time.monotonic() - start
    finally:
        srv.close()
    assert all(g.startswith(b"HTTP/1.0 200") and g.endswith(b"pycni_up 1\n") for g in got)
    assert len(renders) == 1
    assert elapsed >= 23 * 0.05, elapsed  # 24 answers, at least 50 ms apart
