"""Fixtures of the integration tests that several modules share (see tests/conftest.py for
the namespaces and state)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_proc import DaemonProc, start_daemon


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short tmp path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="pycni-d"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(short_dir: Path) -> Iterator[DaemonProc]:
    proc = start_daemon(short_dir)
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log.read_text()
