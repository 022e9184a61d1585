"""Timings measured by the runtime interop tests, shown at the end of the pytest run.

The benchmarks page quotes these; they are printed in the terminal summary (visible with -q)
as medians in ms with the sample count.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

_samples: dict[str, list[float]] = defaultdict(list)
_PLUGIN_NAME = "pycni-runtime-timings"


def record(label: str, ms: float) -> None:
    _samples[label].append(ms)


def median(label: str) -> float:
    return statistics.median(_samples[label])


def lines() -> list[str]:
    return [
        f"  {label:<58} median {statistics.median(values):8.1f} ms  (n={len(values)})"
        for label, values in sorted(_samples.items())
    ]


class _Reporter:
    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if _samples:
            terminalreporter.write_sep("-", "container runtime timings (pycni vs Go plugins)")
            for line in lines():
                terminalreporter.write_line(line)


def report_at_end(config: pytest.Config) -> None:
    """Register the summary printer once per session."""
    if not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(_Reporter(), _PLUGIN_NAME)
