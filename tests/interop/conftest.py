"""Fixtures shared by the real-runtime tests (podman, containerd)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.runtimes.hostnet import RootSnapshot
from tests.interop.runtimes.image import build_oci_archive


@pytest.fixture(scope="module")
def root_state(request: pytest.FixtureRequest) -> Iterator[RootSnapshot]:
    """The root namespace as it was before the module's runtime ran, put back afterwards.

    The module names its bridges with ``BRIDGE_PREFIX``; those and veths that appeared are
    removed along with CNI chains, nft tables and state files that appeared."""
    snapshot = RootSnapshot.take()
    yield snapshot
    snapshot.restore(link_prefixes=("veth", request.module.BRIDGE_PREFIX))


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A busybox OCI archive both runtimes import (built offline from busybox-static)."""
    return build_oci_archive(tmp_path_factory.mktemp("image") / "busybox-oci.tar")
