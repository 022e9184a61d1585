"""The full-kernel lane's host side never passes by skipping: without a guest kernel every
selected lane test is a failure that says why (tests/fullkernel/lane.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lane_without_a_guest_kernel_fails_every_selected_test_and_says_why() -> None:
    env = {
        **os.environ,
        "PYCNI_FULLKERNEL": "vm",
        "PYCNI_VM_KERNEL": "/nonexistent/vmlinuz",
    }
    env.pop("PYCNI_FULLKERNEL_GUEST", None)
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "tests/fullkernel/test_lane.py::test_bridge_vlan_filtering",
            "tests/fullkernel/test_lane.py::test_link_kind_exists",
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "5 errors" in out and "passed" not in out and "skipped" not in out, out
    assert "no guest kernel" in out and "make setup-test" in out, out
    # once in the failures (the summary, untruncated when CI is set, may repeat a first line)
    failures = out.split("short test summary info")[0]
    assert failures.count("guest console (tail)") == 1, out
