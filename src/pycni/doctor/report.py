"""Check results and the runner that isolates them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pycni.record import field, record

OK, WARN, FAIL = "ok", "warn", "fail"
STATUSES = (OK, WARN, FAIL)


@record
class Check:
    """One line of the report: ``fix`` says what to do when the status is not ok."""

    name: str
    status: str
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


CheckFn = Callable[[], Iterable[Check]]


def run_all(groups: Iterable[tuple[str, CheckFn]]) -> list[Check]:
    """Run every group; a group that raises becomes one fail line naming the reason."""
    out: list[Check] = []
    for name, fn in groups:
        try:
            out.extend(fn())
        except Exception as exc:  # a broken check must not hide the others
            out.append(
                Check(
                    name,
                    FAIL,
                    f"the check itself failed: {type(exc).__name__}: {exc}",
                    "run with PYCNI_DEBUG=1 for the traceback and report it",
                )
            )
    return out


def summary(checks: Iterable[Check]) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for check in checks:
        counts[check.status] = counts.get(check.status, 0) + 1
    return counts


def _printable(value: str) -> str:
    """Names from configs and the kernel may hold terminal escapes: never print them raw."""
    return "".join(ch if ch.isprintable() else "?" for ch in value)


def as_text(checks: list[Check]) -> str:
    width = max([len(c.name) for c in checks] + [10])
    lines = []
    for c in checks:
        line = f"{c.status:<4}  {c.name:<{width}}  {c.detail}"
        if c.fix and c.status != OK:
            line += f" → {c.fix}"
        lines.append(_printable(line))
    counts = summary(checks)
    lines.append(f"{counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail")
    return "\n".join(lines) + "\n"
