"""The README runs as written: every shell block, in order, in one shell, from the top of the
repository (after `make demo`'s setup), failing on the first command that fails.

The tour touches only its own namespaces (`tour`, `tour-pod`, and the demo's) and
/tmp/pycni-tour; afterwards nothing of it may be left: no namespace, no file, no daemon.

Blocks the suite does not run carry ``<!-- readme-test: skip (reason) -->`` (see
tests/readme_runner.py): only `make demo`/`make test` (package installs, and `make test`
would run this test again) and the Development block (the suite itself, benchmarks).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import readme_runner

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TOUR_NAMESPACES = ("tour", "tour-pod")
TOUR_DIR = Path("/tmp/pycni-tour")
DEMO_DIR = Path("/run/pycni-demo")
MAX_SKIPPED = 2

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def _tour_namespaces() -> list[str]:
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return [n for n in names if n in TOUR_NAMESPACES or n.startswith("pycni-demo-")]


def _tour_processes() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(TOUR_DIR).encode() in cmdline:
            found.append(int(pid))
    return found


def test_skips_are_few_and_explained() -> None:
    blocks = readme_runner.extract(README.read_text(encoding="utf-8"))
    skipped = [b for b in blocks if b.mode == "skip"]
    assert len(skipped) <= MAX_SKIPPED, [b.first_line for b in skipped]
    assert all(b.reason for b in skipped)
    assert sum(b.mode == "run" for b in blocks) >= 5
    assert any(b.mode == "always" for b in blocks), "the tour must clean up after itself"


def _demo_excerpt() -> list[str]:
    """The unindented lines of the demo output the README shows (its first ```text block):
    headings, ping rows, topology, checks. They carry no timings or random names."""
    text = README.read_text(encoding="utf-8")
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    return [ln.rstrip() for ln in block.splitlines() if ln.strip() and not ln[0].isspace()]


def test_readme_runs_as_written(tmp_path: Path) -> None:
    assert not _tour_namespaces(), f"left over from an earlier run: {_tour_namespaces()}"
    assert not TOUR_DIR.exists() and not DEMO_DIR.exists(), "a tour or kept demo is still up"
    outcome = readme_runner.run(README, cwd=REPO, workdir=tmp_path, timeout=900)
    assert outcome.ok, (
        f"README line {outcome.failed_line}: {outcome.failed_command!r} failed "
        f"(exit {outcome.returncode})\n--- stdout\n{outcome.stdout[-4000:]}\n"
        f"--- stderr\n{outcome.stderr[-4000:]}"
    )
    out = outcome.stdout
    assert "Checks: 16 passed, 0 failed" in out  # the demo, kept and then removed
    shown = _demo_excerpt()
    assert len(shown) >= 12
    printed = {ln.rstrip() for ln in out.splitlines()}
    assert [ln for ln in shown if ln not in printed] == [], "the README's demo output is stale"
    assert '"address": "10.99.0.2/24"' in out  # pycni add's result
    assert out.count("2 received, 0% packet loss") == 2
    assert "hello from tour-pod\n" in out  # the port mapping answering: node 8080 -> pod 80
    assert "Problems (" not in out  # an opaque init is a note, not a problem nobody can act on
    assert "tcp/8080" in out and "→ 10.99.0.2:80" in out  # inspect: the port mapping
    assert "Daemon: answering on /tmp/pycni-tour/pycni.sock" in out
    # block one: the kept demo's daemon, found through the demo's entry points, named as such
    assert "Daemon: answering on /run/pycni-demo/run/pycni.sock" in out
    assert "started by pycni demo (`pycni demo --down` stops it)" in out
    assert ", 0 fail\n" in out  # doctor
    assert out.count("Leaks: none") == 3  # the demo, the tour with its pod, after DEL
    assert not _tour_namespaces()
    assert not TOUR_DIR.exists() and not DEMO_DIR.exists()
    assert not Path("/tmp/demo-node.svg").exists()
    assert not _tour_processes(), "the tour's daemon is still running"
