"""Undo what a failed ADD did: register an undo per step, run them in reverse on failure.

Test-only failure injection: when the request's environment has ``PYCNI_TEST_FAIL_AT`` set to
the name of a step, :meth:`Rollback.step` raises there, so tests can prove that a failure at
any point leaves nothing behind. Runtimes never set it; it has no other effect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType

from pycni.spec.errors import INTERNAL, CNIError

FAIL_AT_ENV = "PYCNI_TEST_FAIL_AT"


class Rollback:
    """A stack of undo callables; use as a context manager around the steps of an ADD."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._fail_at = (env or {}).get(FAIL_AT_ENV, "")
        self._undos: list[tuple[str, Callable[[], object]]] = []
        self.errors: list[str] = []

    def step(self, name: str) -> None:
        """Mark the start of a named step (the failure-injection point for tests)."""
        if self._fail_at and self._fail_at == name:
            raise CNIError(INTERNAL, f"injected failure at step {name!r} ({FAIL_AT_ENV})")

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
                self.errors.append(f"undo {name}: {exc}")

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
        else:
            self.commit()
