"""The fake kernel's contract, real side: the native client in private namespaces answers
every case of tests/kernel_contract.py as recorded there, and as the fake does.

tests/unit/test_fake_kernel.py checks the fake against the same answers without root; with
both green, a case the fake answers differently from the kernel cannot exist. When a kernel
upgrade changes an answer, this module fails first: fix EXPECTED and then the fake.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from pycni.net.fake_kernel import FakeHost, FakeKernel
from pycni.net.rtnl.native import NativeKernel
from tests import harness
from tests.kernel_contract import CASES, EXPECTED, Side


@pytest.fixture
def real_side(node: harness.Namespace, pod_factory: Any) -> Iterator[Side]:
    """Native clients in a fresh node and pod namespace (both with lo up, as the harness
    makes them), with the namespaces' fds."""
    pod = pod_factory()
    with node.entered():
        node_kernel = NativeKernel()
    with pod.entered():
        pod_kernel = NativeKernel()
    node_fd = os.open(node.path, os.O_RDONLY)
    pod_fd = os.open(pod.path, os.O_RDONLY)
    try:
        yield Side(node_kernel, pod_kernel, node_fd, pod_fd)
    finally:
        node_kernel.close()
        pod_kernel.close()
        os.close(node_fd)
        os.close(pod_fd)


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_answers_as_recorded_and_as_the_fake(name: str, real_side: Side) -> None:
    real = CASES[name](real_side)
    host = FakeHost()
    node, pod = host.namespace(), host.namespace()
    fake = CASES[name](Side(FakeKernel(node), FakeKernel(pod), node.fd, pod.fd))
    assert real == EXPECTED[name]
    assert fake == real
