"""The Go reference implementations the differential tests compare pycni with.

Two plugin references are known:

- ``v1.1.1``: Debian 12's containernetworking-plugins in /usr/lib/cni (installed by
  ``make setup``; the tests fail when it is missing).
- ``v1.9.1``: today's upstream (containernetworking/plugins v1.9.1, with cnitool v1.3.0), unpacked
  from the archive in ``../shared/upstream`` beside the checkout, or from the directory named by
  ``PYCNI_UPSTREAM``. The project builds and passes without it: a test that needs it skips and
  says so (``v1.9.1 reference not present``).

``reference(name)`` returns a :class:`Reference` (its plugin dir, cnitool when it has one, and a
label for test output); ``available()`` lists the names present on this machine. The v1.9.1
archive is unpacked once per process into a temporary directory, removed at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEBIAN_DIR = Path("/usr/lib/cni")
UPSTREAM_ARCHIVE = "cni-plugins-v1.9.1-cnitool-v1.3.0-linux-amd64.tar.xz"
NAMES = ("v1.1.1", "v1.9.1")


@dataclass(frozen=True)
class Reference:
    """One Go reference: ``plugin_dir`` holds its plugins; ``cnitool`` its CLI, if it ships one."""

    name: str
    plugin_dir: Path
    cnitool: Path | None

    @property
    def label(self) -> str:
        """What test output prints to say which reference a comparison ran against."""
        return f"Go plugins {self.name} ({self.plugin_dir})"

    def __str__(self) -> str:
        return self.label


def upstream_source() -> Path | None:
    """The folder holding the v1.9.1 archive, or None when this machine has none."""
    configured = os.environ.get("PYCNI_UPSTREAM")
    candidates = [Path(configured)] if configured else []
    candidates.append(ROOT.parent / "shared" / "upstream")
    for folder in candidates:
        if (folder / UPSTREAM_ARCHIVE).is_file():
            return folder
    return None


@cache
def _upstream_dir() -> Path | None:
    source = upstream_source()
    if source is None:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="pycni-ref-v1.9.1-"))
    atexit.register(shutil.rmtree, scratch, True)
    target = scratch / "bin"
    target.mkdir()
    subprocess.run(
        ["tar", "-C", str(target), "-xJf", str(source / UPSTREAM_ARCHIVE)],
        check=True,
        capture_output=True,
    )
    return target


def available() -> list[str]:
    """The reference names present here, oldest first."""
    names = []
    if (DEBIAN_DIR / "bridge").exists():
        names.append("v1.1.1")
    if upstream_source() is not None:
        names.append("v1.9.1")
    return names


def reference(name: str) -> Reference | None:
    """The reference called ``name``, or None when it is not present on this machine."""
    if name == "v1.1.1":
        if not (DEBIAN_DIR / "bridge").exists():
            return None
        return Reference(name, DEBIAN_DIR, None)
    if name == "v1.9.1":
        directory = _upstream_dir()
        if directory is None:
            return None
        return Reference(name, directory, directory / "cnitool")
    raise ValueError(f"unknown reference {name!r}; known: {', '.join(NAMES)}")
