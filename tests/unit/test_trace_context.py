"""W3C trace context in the runtime (libcni's TRACEPARENT/TRACESTATE/BAGGAGE) and the
daemon's spans of a call (pycni.daemon.otlp), without a kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pycni.daemon import otlp
from pycni.daemon.stats import CallRecord
from pycni.runtime import CNIConfig, RuntimeConf, TraceContext, conf_list_from_bytes
from tests.unit.test_runtime_support import FakePlugins, conflist

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_parse_accepts_version_00_only_with_nonzero_ids() -> None:
    trace = TraceContext.parse(GOOD, "a=1", "k=v")
    assert trace is not None and trace.sampled
    assert (trace.trace_id, trace.span_id) == (GOOD[3:35], GOOD[36:52])
    assert trace.env() == {"TRACEPARENT": GOOD, "TRACESTATE": "a=1", "BAGGAGE": "k=v"}
    for bad in (
        "",
        GOOD.upper(),
        GOOD.replace("00-", "ff-", 1),
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01",
        GOOD + "-extra",
        GOOD[:-1],
    ):
        assert TraceContext.parse(bad) is None, bad
    unsampled = TraceContext.parse(GOOD[:-2] + "00")
    assert unsampled is not None and not unsampled.sampled
    assert TraceContext.parse(GOOD, "a=\x1b[2J", "x" * 9000) == TraceContext(GOOD)


@given(st.text(max_size=80), st.text(max_size=80), st.text(max_size=80))
def test_hostile_values_never_reach_the_environment_unchecked(tp: str, ts: str, bg: str) -> None:
    trace = TraceContext.parse(tp, ts, bg)
    if trace is None:
        return
    for value in trace.env().values():
        assert all(" " <= ch <= "~" for ch in value)
    assert len(trace.traceparent) == 55


def test_the_runtime_passes_trace_context_to_every_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", "00-inherited-but-replaced")
    monkeypatch.setenv("BAGGAGE", "old=1")
    monkeypatch.delenv("TRACESTATE", raising=False)
    fakes = FakePlugins(tmp_path / "bin")
    log = tmp_path / "env.log"
    body = (
        f'echo "$CNI_COMMAND ${{TRACEPARENT-unset}} ${{TRACESTATE-unset}} ${{BAGGAGE-unset}}"'
        f" >> {log}\ncat >/dev/null\n"
        '[ "$CNI_COMMAND" = ADD ] && echo \'{"cniVersion":"1.1.0"}\'\nexit 0\n'
    )
    fakes.script("a", body)
    fakes.script("b", body)
    conf = conf_list_from_bytes(conflist("net", "1.1.0", {"type": "a"}, {"type": "b"}))
    cni = CNIConfig([str(fakes.dir)], cache_dir=str(tmp_path / "cache"))
    rt = RuntimeConf(container_id="c1", netns="/x", ifname="eth0")
    trace = TraceContext.parse(GOOD, "vendor=x")
    cni.add_network_list(conf, rt, trace=trace)
    cni.del_network_list(conf, rt, trace=trace)
    # the given context replaces the inherited one, BAGGAGE included
    assert log.read_text().splitlines() == [
        f"{verb} {GOOD} vendor=x unset" for verb in ("ADD", "ADD", "DEL", "DEL")
    ]
    log.unlink()
    cni.del_network_list(conf, rt)  # no context given: the environment passes as it is
    assert log.read_text().splitlines()[0] == "DEL 00-inherited-but-replaced unset old=1"


def _record(traceparent: str = GOOD) -> CallRecord:
    rec = CallRecord(1700000000.0, "call", "bridge", "ADD", "c1", recv=1.0, queue=2.0, run=5.0)
    rec.send, rec.total, rec.traceparent = 0.5, 9.0, traceparent
    return rec


def test_spans_of_a_call_parent_and_steps() -> None:
    call, *steps = otlp.spans_of(_record())
    assert call["name"] == "ADD bridge" and call["parentSpanId"] == GOOD[36:52]
    assert [s["name"] for s in steps] == ["recv", "queue", "run", "send"]
    assert all(s["parentSpanId"] == call["spanId"] for s in steps)
    assert int(steps[2]["startTimeUnixNano"]) == int(call["startTimeUnixNano"]) + 3_000_000
    assert otlp.spans_of(_record(GOOD[:-2] + "00")) == []  # not sampled
    (root, *_) = otlp.spans_of(_record("garbage"))
    assert "parentSpanId" not in root and len(root["traceId"]) == 32
    body = json.loads(otlp.document([call]))
    assert body["resourceSpans"][0]["scopeSpans"][0]["spans"] == [call]


def test_endpoint_configuration() -> None:
    assert otlp.endpoint_from(None, {}) is None
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}
    assert otlp.endpoint_from(None, env) == "http://127.0.0.1:4318/v1/traces"
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://c:1/x"
    assert otlp.endpoint_from(None, env) == "http://c:1/x"
    assert otlp.endpoint_from("http://f:2", env) == "http://f:2/v1/traces"
    for bad in ("file:///etc/passwd", "http://a b", "ftp://x"):
        with pytest.raises(otlp.EndpointError):
            otlp.endpoint_from(bad, {})
