"""Trace context end to end: a runtime starts a trace (libcni's TRACEPARENT/TRACESTATE), the
entry points forward it to the daemon with the rest of the environment, and the daemon exports
one span per plugin call (child of the runtime's span) and one per step (children of the call)
to an OTLP/HTTP receiver on 127.0.0.1 run by this test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime import CNIConfig, RuntimeConf, TraceContext, conf_list_from_bytes
from tests import harness

pytestmark = pytest.mark.kernel

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
STEPS = {"recv", "queue", "run", "send"}


class Receiver:
    """OTLP/HTTP JSON collector: every span POSTed to /v1/traces."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.paths.append(self.path)
                data = json.loads(body)
                for resource in data["resourceSpans"]:
                    for scope in resource["scopeSpans"]:
                        outer.spans.extend(scope["spans"])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait_for(self, ok: Callable[[list[dict[str, Any]]], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ok(self.spans):
            assert time.monotonic() < deadline, f"spans never arrived: {self.spans}"
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def traced_daemon(tmp_path: Path, receiver: Receiver) -> Iterator[Path]:
    """Entry points forwarding to a daemon that exports to the receiver."""
    from pycni.entrypoints import install

    sock = str(tmp_path / "run" / "pycni.sock")
    os.makedirs(os.path.dirname(sock))
    install.install(tmp_path / "bin", form="auto", socket_path=sock, autostart=False)
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pycni.cli.daemon_cmd",
            "--socket",
            sock,
            "--log-level",
            "ERROR",
            "--otlp-endpoint",
            receiver.url,
        ],
    )
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            assert daemon.poll() is None, "the pycni daemon exited at start"
            assert time.monotonic() < deadline, "the pycni daemon did not start"
            time.sleep(0.05)
        yield tmp_path / "bin"
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def _conflist(data_dir: Path) -> bytes:
    return json.dumps(
        {
            "cniVersion": "1.1.0",
            "name": "traced",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "trace0",
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.75.0.0/24"}]],
                        "dataDir": str(data_dir),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
    ).encode()


def _calls(spans: list[dict[str, Any]], command: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith(f"{command} ")]


def test_a_runtime_trace_reaches_the_collector_with_a_span_per_plugin_and_step(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    traced_daemon: Path,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    pod = pod_factory()
    trace = TraceContext.parse(f"00-{TRACE_ID}-{PARENT}-01", "vendor=abc")
    assert trace is not None
    conf = conf_list_from_bytes(_conflist(tmp_path / "ipam"))
    cni = CNIConfig([str(traced_daemon)], cache_dir=str(tmp_path / "cache"))
    rt = RuntimeConf(container_id="traced1", netns=pod.path, ifname="eth0")
    with node.entered():
        cni.add_network_list(conf, rt, trace=trace)
        cni.del_network_list(conf, rt, trace=trace)
    receiver.wait_for(lambda spans: len(_calls(spans, "DEL")) >= 2)
    assert set(receiver.paths) == {"/v1/traces"}
    spans = receiver.spans
    for command in ("ADD", "DEL"):
        calls = _calls(spans, command)
        assert sorted(s["name"] for s in calls) == [f"{command} bridge", f"{command} portmap"]
        for call in calls:
            assert call["traceId"] == TRACE_ID and call["parentSpanId"] == PARENT
            assert call["traceState"] == "vendor=abc"
            assert call["kind"] == 2
            steps = [s for s in spans if s.get("parentSpanId") == call["spanId"]]
            assert {s["name"] for s in steps} == STEPS and len(steps) == len(STEPS)
            start, end = int(call["startTimeUnixNano"]), int(call["endTimeUnixNano"])
            for step in steps:
                assert step["traceId"] == TRACE_ID
                assert start <= int(step["startTimeUnixNano"]) <= int(step["endTimeUnixNano"])
                assert int(step["startTimeUnixNano"]) <= end
    ids = [s["spanId"] for s in spans]
    assert len(ids) == len(set(ids))  # every span its own id


def test_an_unsampled_trace_is_not_exported_and_an_untraced_call_starts_its_own(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    traced_daemon: Path,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    pod = pod_factory()
    conf = conf_list_from_bytes(_conflist(tmp_path / "ipam"))
    cni = CNIConfig([str(traced_daemon)], cache_dir=str(tmp_path / "cache"))
    rt = RuntimeConf(container_id="traced2", netns=pod.path, ifname="eth0")
    unsampled = TraceContext.parse(f"00-{TRACE_ID}-{PARENT}-00")
    with node.entered():
        cni.add_network_list(conf, rt, trace=unsampled)
        cni.del_network_list(conf, rt)
    receiver.wait_for(lambda spans: len(_calls(spans, "DEL")) >= 2)
    assert _calls(receiver.spans, "ADD") == []
    for call in _calls(receiver.spans, "DEL"):
        assert "parentSpanId" not in call and call["traceId"] != TRACE_ID
