"""The suite's lanes (tests/lanes.py, docs/testing.md): a file's lane follows from its path,
tests/plugins holds one directory per registered plugin type, and ``--lane`` collects exactly
the files of the lanes it names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pycni.skel.registry import PLUGIN_TYPES
from tests import lanes

ROOT = lanes.TESTS.parent


@pytest.mark.parametrize(
    ("path", "lane"),
    [
        ("tests/plugins/macvlan/test_logic.py", "unit"),
        ("tests/plugins/macvlan/test_macvlan_kernel.py", "kernel"),
        ("tests/plugins/podman/test_podman_interop.py", "interop"),
        ("tests/plugins/vrf/test_vrf_fullkernel.py", "fullkernel"),
        ("tests/unit/test_cli.py", "unit"),
        ("tests/integration/test_daemon.py", "kernel"),
        ("tests/interop/test_podman.py", "interop"),
        ("tests/fullkernel/test_lane.py", "fullkernel"),
        ("tests/plugins/macvlan/support.py", None),
        ("tests/harness.py", None),
        ("tests/netfilter/test_nft_contract.py", "unit"),
        ("tests/netfilter/test_nft_contract_kernel.py", "kernel"),
        ("tests/integration/test_x_fullkernel.py", "kernel"),
        ("/elsewhere/test_x_kernel.py", None),
    ],
)
def test_a_files_lane_is_its_tree_or_its_suffix(path: str, lane: str | None) -> None:
    assert lanes.lane_of(ROOT / path) == lane


def test_a_plugins_directory_is_named_after_a_registered_plugin_type() -> None:
    known = {name.replace("-", "_") for name in PLUGIN_TYPES}
    found = {p.name for p in lanes.PLUGINS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert found <= known, f"not a plugin type: {sorted(found - known)}"
    for name in found:  # a package each: the same file name may be in two plugins' dirs
        assert (lanes.PLUGINS / name / "__init__.py").is_file(), name


def test_lane_option_leaves_out_the_files_and_trees_of_other_lanes() -> None:
    assert lanes.outside(ROOT / "tests/plugins/vrf/test_vrf_fullkernel.py", ["unit", "kernel"])
    assert not lanes.outside(ROOT / "tests/plugins/vrf/test_vrf_fullkernel.py", ["fullkernel"])
    assert lanes.outside(ROOT / "tests/unit", ["kernel"])  # its conftest is not even imported
    assert not lanes.outside(ROOT / "tests/plugins", ["kernel"])
    assert not lanes.outside(ROOT / "tests/plugins/bridge/support.py", ["kernel"])
    assert not lanes.outside(ROOT / "tests/unit/test_cli.py", [])


def test_lane_option_collects_exactly_that_lanes_files() -> None:
    def collected(*lane: str) -> set[str]:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["--collect-only", "tests/plugins", "tests/fullkernel"]
        argv += [f"--lane={name}" for name in lane]
        proc = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
        # Not the exit status: the session's leak check may see another suite's state change.
        assert "error" not in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
        return {line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line}

    everything = collected()
    assert {"unit", "kernel", "fullkernel"} <= {lanes.lane_of(ROOT / f) for f in everything}
    unit = collected("unit")
    assert unit and unit == {f for f in everything if lanes.lane_of(ROOT / f) == "unit"}


def test_every_test_file_is_in_a_lane() -> None:
    for path in lanes.TESTS.rglob("test_*.py"):
        assert lanes.lane_of(path) in lanes.LANES, path
