"""The daemon's counters and per-phase timings of recent calls (``pycni daemon --stats``)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pycni.record import record

PHASES = ("recv", "queue", "run", "send", "total")
COUNTERS = (
    "requests",
    "calls",
    "errors",
    "bad_requests",
    "refused",
    "run_locally",
    "busy",
    "timed_out",
    "dropped",
    "rolled_back",
    "retired_workers",
    "accept_backoffs",
)


@record
class CallRecord:
    """Timings of one served request, in milliseconds."""

    at: float
    kind: str
    plugin_type: str = ""
    command: str = ""
    container_id: str = ""
    exit_code: int = 0
    error_code: int = 0  # the CNI error code of a failed call (its stdout's "code")
    recv: float = 0.0
    queue: float = 0.0
    run: float = 0.0
    send: float = 0.0
    total: float = 0.0
    note: str = ""
    traceparent: str = ""  # the call's TRACEPARENT (checked only by an exporter that uses it)
    tracestate: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            k: (round(v, 3) if isinstance(v, float) else v)
            for k, v in self.__dict__.items()
            if v or k not in ("traceparent", "tracestate")
        }

    def add_note(self, text: str) -> None:
        self.note = f"{self.note}; {text}" if self.note else text


def ms(start_ns: int, end_ns: int) -> float:
    return (end_ns - start_ns) / 1e6


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))
    return round(sorted_values[index], 3)


class Stats:
    """Thread-safe counters plus a window of the last ``keep`` records."""

    def __init__(self, keep: int = 1000) -> None:
        self._lock = threading.Lock()
        self._records: deque[CallRecord] = deque(maxlen=keep)
        self._counts = dict.fromkeys(COUNTERS, 0)
        self.observer: Callable[[CallRecord], None] | None = None  # metrics.py, when on

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def bump(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counts[name] += by

    def record(self, rec: CallRecord) -> None:
        with self._lock:
            self._records.append(rec)
            self._counts["requests"] += 1
            if rec.kind == "call":
                self._counts["calls"] += 1
                if rec.exit_code != 0:
                    self._counts["errors"] += 1
            elif rec.kind == "bad-request":
                self._counts["bad_requests"] += 1
            elif rec.kind == "refused":
                self._counts["refused"] += 1
            elif rec.kind == "run-locally":
                self._counts["run_locally"] += 1
        if self.observer is not None:
            self.observer(rec)

    def snapshot(self, recent: int = 20) -> dict[str, Any]:
        with self._lock:
            records = [r for r in self._records if r.kind == "call"]
            counts = dict(self._counts)
        phases: dict[str, dict[str, float]] = {}
        for phase in PHASES:
            values = sorted(getattr(r, phase) for r in records)
            phases[phase] = {
                "p50": percentile(values, 0.5),
                "p90": percentile(values, 0.9),
                "p99": percentile(values, 0.99),
                "max": round(values[-1], 3) if values else 0.0,
                "mean": round(sum(values) / len(values), 3) if values else 0.0,
            }
        return {
            "counts": counts,
            "window": len(records),
            "phasesMs": phases,
            "recent": [r.as_dict() for r in records[-recent:]],
        }


def error_code(stdout: bytes) -> int:
    """The ``code`` of the CNI error object a failed call printed (0 when there is none)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        code = json.loads(stdout).get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    return 0


def new_record(kind: str) -> CallRecord:
    return CallRecord(time.time(), kind)
