"""Shared fixtures. See tests/harness.py for what the namespaces and state objects offer.

- ``node``: a fresh private node namespace (the plugins' host side).
- ``pod_factory``: ``pod_factory()`` returns a new pod namespace; all removed after the test.
- ``tmp_state``: per-test cache_dir / data_dir / conf_dir under tmp.
- ``plugin_dir``: a directory with pycni's plugins installed (session scope), for CNI_PATH.
- ``go_plugin_dir``: ``go_reference.plugin_dir`` (so each Go reference in turn).
- ``go_reference``: each Go reference in turn (tests/references.py: Debian's v1.1.1, then
  upstream v1.9.1 with cnitool v1.3.0, which skips when ../shared/upstream is absent).
- ``upstream_reference``: v1.9.1 alone (skips when absent).
- ``cni_path``: ``plugin_dir`` as a CNI_PATH string.
The session fails when a namespace of this run or any global CNI state leaked.

Hypothesis runs under the ``ci`` profile unless ``HYPOTHESIS_PROFILE`` names another: examples
are derived from each test's name (``derandomize``), so every run of the suite tries the same
inputs and a red run replays; no deadline, so a slow example on a loaded machine is not a failure;
no example database (a fresh clone has none, a developer's must not change what CI runs).
``HYPOTHESIS_PROFILE=explore`` draws new random examples on every run, to look for new failures.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests import harness, references

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_baseline: set[str] = set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The daemon-mode rerun (PYCNI_TEST_MODE=daemon) runs only tests whose plugins come from
    ``plugin_dir``: the others do the same in both modes and ran in the first pass. pytest
    reports them as deselected."""
    if os.environ.get("PYCNI_TEST_MODE", "inprocess") != "daemon":
        return
    keep = [i for i in items if "plugin_dir" in getattr(i, "fixturenames", ())]
    dropped = [i for i in items if "plugin_dir" not in getattr(i, "fixturenames", ())]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_sessionstart(session: pytest.Session) -> None:
    _baseline.update(harness.global_state())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    problems = [f"netns {n}" for n in harness.leftover_namespaces()]
    for name in harness.leftover_namespaces():
        harness.Namespace(name).delete()
    problems += sorted(harness.global_state() - _baseline)
    if problems:
        sys.stderr.write("\nLEAK CHECK FAILED — the suite left state behind:\n")
        for item in problems:
            sys.stderr.write(f"  {item}\n")
        session.exitstatus = 1


@pytest.fixture
def node() -> Iterator[harness.Namespace]:
    ns = harness.create_namespace("node")
    try:
        yield ns
    finally:
        ns.delete()


@pytest.fixture
def pod_factory() -> Iterator[object]:
    created: list[harness.Namespace] = []

    def make() -> harness.Namespace:
        ns = harness.create_namespace("pod")
        created.append(ns)
        return ns

    try:
        yield make
    finally:
        for ns in created:
            ns.delete()


@pytest.fixture
def tmp_state(tmp_path: Path) -> harness.State:
    return harness.State.make(tmp_path / "state")


@pytest.fixture(scope="session")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pycni's entry points, for CNI_PATH.

    PYCNI_TEST_MODE=daemon starts a daemon on a private socket for the session and installs the
    fast forwarders pointed at it, so every plugin test runs through the daemon; the default is
    the in-process form.
    """
    from pycni.entrypoints import install

    directory = tmp_path_factory.mktemp("pycni-plugins")
    if os.environ.get("PYCNI_TEST_MODE", "inprocess") != "daemon":
        install.install(directory, form="inprocess")
        yield directory
        return
    sock = str(tmp_path_factory.mktemp("pycni-daemon") / "pycni.sock")
    install.install(directory, form="auto", socket_path=sock)
    with harness.running_daemon(sock, "WARNING"):
        yield directory


@pytest.fixture
def cni_path(plugin_dir: Path) -> str:
    return str(plugin_dir)


@pytest.fixture(scope="session")
def go_plugin_dir(go_reference: references.Reference) -> Path:
    """The plugin dir of each Go reference in turn (``go_reference``: the test id names it)."""
    return go_reference.plugin_dir


def _reference_or_skip(name: str) -> references.Reference:
    found = references.reference(name)
    if found is None:
        if name == "v1.1.1":
            pytest.fail("containernetworking-plugins (v1.1.1, /usr/lib/cni) is not installed")
        pytest.skip(f"{name} reference not present (../shared/upstream or PYCNI_UPSTREAM)")
    return found


@pytest.fixture(scope="session", params=references.NAMES, ids=lambda n: f"go-{n}")
def go_reference(request: pytest.FixtureRequest) -> references.Reference:
    """Each Go reference in turn; the test id (``go-v1.9.1``) names the one a comparison ran
    against. The daemon-mode rerun (PYCNI_TEST_MODE=daemon) compares with v1.9.1 alone when it
    is present: the in-process run has compared with v1.1.1, and CI time is bounded.
    PYCNI_REFERENCES (comma-separated names) limits any run to those references."""
    name = str(request.param)
    wanted = os.environ.get("PYCNI_REFERENCES", "").split(",")
    if wanted != [""] and name not in wanted:  # e.g. PYCNI_REFERENCES=v1.9.1 for a faster lane
        pytest.skip(f"PYCNI_REFERENCES={','.join(wanted)} leaves {name} out")
    daemon = os.environ.get("PYCNI_TEST_MODE", "inprocess") == "daemon"
    if daemon and name == "v1.1.1" and "v1.9.1" in references.available():
        pytest.skip("daemon mode compares with v1.9.1 only (the in-process run covers v1.1.1)")
    return _reference_or_skip(name)


@pytest.fixture(scope="session")
def upstream_reference() -> references.Reference:
    """Today's upstream, v1.9.1 (plugins) with cnitool v1.3.0."""
    return _reference_or_skip("v1.9.1")


def pytest_report_header(config: pytest.Config) -> str:
    names = references.available()
    return "Go references: " + (", ".join(names) if names else "none")
