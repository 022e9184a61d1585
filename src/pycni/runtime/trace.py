"""W3C trace context for plugin calls: ``TRACEPARENT``, ``TRACESTATE`` and ``BAGGAGE``.

libcni (main, pkg/invoke/raw_exec.go ``injectTraceContext``) adds these three variables to a
plugin's environment when the call's context carries a valid span context, following the
OpenTelemetry proposal for context in environment variables (OTEP 0258). pycni's runtime does
the same when a call is given a ``TraceContext``; the entry points and the daemon pass the
environment through unchanged, and the daemon can export its timings of the call as spans of
that trace (pycni.daemon.otlp).

The values come from a caller (or a parent process's environment) and end up in a plugin's
environment and in exported spans, so they are checked: a traceparent that is not
``00-<32 hex>-<16 hex>-<2 hex>`` with non-zero ids is dropped, as libcni drops an invalid span
context; tracestate and baggage must be printable ASCII within the W3C size limits.
"""

from __future__ import annotations

from collections.abc import Mapping

from pycni.record import record

__all__ = ["TraceContext", "apply"]

ENV_KEYS = ("TRACEPARENT", "TRACESTATE", "BAGGAGE")
_HEX = frozenset("0123456789abcdef")
TRACESTATE_MAX = 512  # W3C trace-context: at most 32 members, 512 bytes is the usual bound
BAGGAGE_MAX = 8192  # W3C baggage: 8192 bytes in total


def _hex(text: str, length: int) -> bool:
    return len(text) == length and set(text) <= _HEX and text != "0" * length


def _valid_traceparent(value: str) -> bool:
    """Version 00: ``00-<trace id>-<parent span id>-<flags>``, lowercase hex, ids not zero."""
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00":
        return False
    return (
        _hex(parts[1], 32) and _hex(parts[2], 16) and len(parts[3]) == 2 and set(parts[3]) <= _HEX
    )


def _printable(value: str, limit: int) -> bool:
    return len(value) <= limit and all(" " <= ch <= "~" for ch in value)


@record(frozen=True)
class TraceContext:
    traceparent: str
    tracestate: str = ""
    baggage: str = ""

    @property
    def trace_id(self) -> str:
        return self.traceparent.split("-")[1]

    @property
    def span_id(self) -> str:
        return self.traceparent.split("-")[2]

    @property
    def sampled(self) -> bool:
        return int(self.traceparent.split("-")[3], 16) & 1 == 1

    @classmethod
    def parse(
        cls, traceparent: str, tracestate: str = "", baggage: str = ""
    ) -> TraceContext | None:
        """The context, or None when the traceparent is invalid; a bad tracestate or baggage
        is left out (the trace itself still holds)."""
        traceparent = traceparent.strip()
        if not _valid_traceparent(traceparent):
            return None
        state = tracestate.strip() if _printable(tracestate.strip(), TRACESTATE_MAX) else ""
        bag = baggage.strip() if _printable(baggage.strip(), BAGGAGE_MAX) else ""
        return cls(traceparent, state, bag)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TraceContext | None:
        return cls.parse(
            environ.get("TRACEPARENT", ""),
            environ.get("TRACESTATE", ""),
            environ.get("BAGGAGE", ""),
        )

    def env(self) -> dict[str, str]:
        """The variables libcni sets: TRACEPARENT always, the others when not empty."""
        out = {"TRACEPARENT": self.traceparent}
        if self.tracestate:
            out["TRACESTATE"] = self.tracestate
        if self.baggage:
            out["BAGGAGE"] = self.baggage
        return out


def apply(env: dict[str, str], trace: TraceContext | None) -> dict[str, str]:
    """``env`` with ``trace``'s variables replacing any inherited ones (unchanged when None)."""
    if trace is None:
        return env
    for key in ENV_KEYS:
        env.pop(key, None)
    env.update(trace.env())
    return env
