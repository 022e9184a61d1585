"""The fake kernel's contract, real side: the native client in private namespaces answers every
case of tests/kernel_contract.py as recorded there, and as the fake does.

tests/unit/test_fake_kernel.py checks the fake against the same answers without root; with
both green, a case the fake answers differently from the kernel cannot exist. When a kernel
upgrade changes an answer, this module fails first: fix EXPECTED and then the fake. The
native client is the only Kernel on a real kernel, so it is the one held here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pycni.net.netlink.rtnl.native import NativeKernel
from tests import harness
from tests.kernel_contract import CASES, EXPECTED, on_fake, on_kernel


@pytest.fixture
def namespaces(node: harness.Namespace, pod_factory: Any) -> Iterator[tuple[Any, Any]]:
    yield node, pod_factory()


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_answers_as_recorded_and_as_the_fake(
    name: str, namespaces: tuple[harness.Namespace, harness.Namespace]
) -> None:
    node, pod = namespaces
    real = on_kernel(CASES[name], node, pod, NativeKernel)
    assert real == EXPECTED[name]
    assert on_fake(CASES[name]) == real
