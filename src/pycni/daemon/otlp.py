"""The daemon's per-call timings as OpenTelemetry spans, sent over OTLP/HTTP with JSON.

Loaded only when an endpoint is configured (``pycni daemon --otlp-endpoint URL``, else
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` used as is, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` plus
``/v1/traces``): without one nothing here is imported and a call costs nothing more.

Each served plugin call becomes one span ``<COMMAND> <plugin>`` (kind SERVER) whose parent is
the span in the call's ``TRACEPARENT`` (the runtime's, passed by libcni as W3C trace context
and forwarded unchanged by the entry points), with one child span per step the daemon times:
``recv`` (reading the request), ``queue`` (waiting for its container's lane and a worker),
``run`` (the plugin), ``send`` (the reply). A call without a valid TRACEPARENT starts a trace
of its own; one whose TRACEPARENT says "not sampled" is not exported.

Why not the opentelemetry SDK: it and its OTLP exporter pull in protobuf, googleapis and
requests (tens of MB, and imports measured in hundreds of ms) into a root daemon, for what is
one JSON document per batch; OTLP/HTTP's JSON encoding is a stable part of the protocol and
every collector accepts it. The exporter is a thread with a bounded queue: the daemon's main
thread only appends a record, and a slow or dead collector drops spans, never delays calls.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import secrets
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from pycni.daemon.stats import CallRecord
from pycni.runtime.trace import TraceContext

log = logging.getLogger("pycni.daemon")

SPAN_KIND_INTERNAL, SPAN_KIND_SERVER = 1, 2
STATUS_ERROR = 2
STEPS = ("recv", "queue", "run", "send")
MAX_QUEUE = 4096
MAX_BATCH = 256


class EndpointError(ValueError):
    """The configured endpoint is not an http(s) URL."""


def endpoint_from(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The traces URL to POST to, or None when tracing is off."""
    if flag:
        url = flag.rstrip("/") + "/v1/traces"
    elif environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        url = environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    elif environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        url = environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    else:
        return None
    if not url.startswith(("http://", "https://")) or any(c <= " " for c in url):
        raise EndpointError(f"OTLP endpoint {url!r}: only http:// or https:// URLs")
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    if protocol and protocol != "http/json":
        log.warning("OTLP protocol %s asked for; pycni sends http/json", protocol)
    return url


def _attr(key: str, value: str | int) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def spans_of(rec: CallRecord) -> list[dict[str, Any]]:
    """The spans of one recorded call: the call, then its steps (empty when not exported)."""
    if rec.kind != "call" or not rec.plugin_type:
        return []
    parent = TraceContext.parse(rec.traceparent, rec.tracestate)
    if parent is not None and not parent.sampled:
        return []
    trace_id = parent.trace_id if parent is not None else secrets.token_hex(16)
    call_id = secrets.token_hex(8)
    start = int(rec.at * 1e9)
    end = start + int(rec.total * 1e6)
    attrs = [
        _attr("cni.command", rec.command),
        _attr("cni.plugin.type", rec.plugin_type),
        _attr("cni.container_id", rec.container_id),
        _attr("process.exit.code", rec.exit_code),
    ]
    if rec.error_code:
        attrs.append(_attr("cni.error.code", rec.error_code))
    call: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": call_id,
        "name": f"{rec.command or 'CALL'} {rec.plugin_type}",
        "kind": SPAN_KIND_SERVER,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attrs,
    }
    if parent is not None:
        call["parentSpanId"] = parent.span_id
        if parent.tracestate:
            call["traceState"] = parent.tracestate
    if rec.exit_code != 0:
        call["status"] = {"code": STATUS_ERROR, "message": rec.note[:200]}
    out = [call]
    at = start
    for step in STEPS:
        length = int(getattr(rec, step) * 1e6)
        out.append(
            {
                "traceId": trace_id,
                "spanId": secrets.token_hex(8),
                "parentSpanId": call_id,
                "name": step,
                "kind": SPAN_KIND_INTERNAL,
                "startTimeUnixNano": str(at),
                "endTimeUnixNano": str(at + length),
            }
        )
        at += length
    return out


def document(spans: list[dict[str, Any]]) -> bytes:
    """An ExportTraceServiceRequest in OTLP's JSON encoding."""
    resource = {
        "attributes": [
            _attr("service.name", "pycni-daemon"),
            _attr("process.pid", os.getpid()),
        ]
    }
    body = {
        "resourceSpans": [
            {
                "resource": resource,
                "scopeSpans": [{"scope": {"name": "pycni.daemon"}, "spans": spans}],
            }
        ]
    }
    return json.dumps(body, separators=(",", ":")).encode()


class Exporter:
    """``observe`` (the daemon's main thread) queues; a thread batches and POSTs."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self.dropped = 0
        self._queue: queue.Queue[CallRecord | None] = queue.Queue(MAX_QUEUE)
        self._thread = threading.Thread(target=self._loop, name="pycni-otlp", daemon=True)
        self._thread.start()

    def observe(self, rec: CallRecord) -> None:
        if rec.kind != "call":
            return
        try:
            self._queue.put_nowait(rec)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (within ``timeout``), then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [r for r in batch if r is not None]
            spans = [span for rec in records for span in spans_of(rec)]
            if spans:
                self._post(document(spans))
            if None in batch:
                return

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                reply.read(4096)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("OTLP export to %s failed: %s", self.url, exc)
