"""Undo what a failed ADD did: register an undo per step, run them in reverse on failure.

Test-only failure injection: when the request's environment has ``PYCNI_TEST_FAIL_AT`` set to
the name of a step, :meth:`Rollback.step` raises there, so tests can prove that a failure at
any point leaves nothing behind. Runtimes never set it; it has no other effect.

An undo that fails does not stop the others; what failed is logged (logger ``pycni.rollback``)
and added to the error being reported: to a CNIError's ``details``, or as a note on any other
exception (skel puts the notes of a code-999 error in its details), so a failed ADD that left
something behind says so.

Steps are also timed: with ``PYCNI_STEP_TIMINGS=1`` in the request's environment the plugin
logs one stderr line with the milliseconds each step took (how the hot path is profiled).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import TracebackType

from pycni.spec.errors import CNIError, InternalError

__all__ = ["FAIL_AT_ENV", "Rollback"]

FAIL_AT_ENV = "PYCNI_TEST_FAIL_AT"
TIMINGS_ENV = "PYCNI_STEP_TIMINGS"

LOGGER = "pycni.rollback"


class Rollback:
    """A stack of undo callables; use as a context manager around the steps of an ADD."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._fail_at = (env or {}).get(FAIL_AT_ENV, "")
        self._undos: list[tuple[str, Callable[[], object]]] = []
        self.errors: list[str] = []
        self._timed = (env or {}).get(TIMINGS_ENV, "") == "1"
        self._marks: list[tuple[str, float]] = [("start", time.perf_counter())]

    def step(self, name: str) -> None:
        """Mark the start of a named step (the failure-injection point for tests)."""
        if self._timed:
            self._marks.append((name, time.perf_counter()))
        if self._fail_at and self._fail_at == name:
            raise InternalError(f"injected failure at step {name!r} ({FAIL_AT_ENV})")

    def push(self, name: str, undo: Callable[[], object]) -> None:
        """Register how to undo something that was just done."""
        self._undos.append((name, undo))

    def run(self) -> None:
        """Run every undo, newest first; an undo that fails is recorded and the rest still run."""
        while self._undos:
            name, undo = self._undos.pop()
            try:
                undo()
            except Exception as exc:
                self.errors.append(f"undo {name}: {exc or type(exc).__name__}")
                import logging  # only when an undo fails: not loaded by every ADD

                logging.getLogger(LOGGER).warning(
                    "rollback: undo of step %s failed: %s", name, exc, exc_info=True
                )

    def report(self) -> str:
        """What the last :meth:`run` could not undo ("" when everything was undone)."""
        if not self.errors:
            return ""
        return "rollback incomplete: " + "; ".join(self.errors)

    def commit(self) -> None:
        """Success: forget the undos."""
        self._undos.clear()

    def __enter__(self) -> Rollback:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.run()
            report = self.report()
            if report:
                _attach(exc, report)
        else:
            self.commit()

    def timings(self) -> str:
        """``step=ms …`` for the steps so far ("" unless PYCNI_STEP_TIMINGS=1)."""
        if not self._timed:
            return ""
        marks = [*self._marks, ("end", time.perf_counter())]
        return " ".join(
            f"{name}={(marks[i + 1][1] - at) * 1000:.2f}" for i, (name, at) in enumerate(marks[:-1])
        )


def _attach(exc: BaseException, report: str) -> None:
    """Add what the rollback left behind to the error that is about to be reported."""
    if isinstance(exc, CNIError):
        exc.details = f"{exc.details}; {report}" if exc.details else report
    else:
        exc.add_note(report)
