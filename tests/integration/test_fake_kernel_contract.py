"""The fake kernel's contract, real side: both real clients in private namespaces answer every
case of tests/kernel_contract.py as recorded there, and as the fake does.

tests/unit/test_fake_kernel.py checks the fake against the same answers without root; with
both green, a case the fake answers differently from the kernel cannot exist. When a kernel
upgrade changes an answer, this module fails first: fix EXPECTED and then the fake. The
pyroute2 adapter (PYCNI_NETLINK=pyroute2) runs the same cases, so the two real clients agree
too; where they do not yet, KNOWN_DIFFERENCES says why (each is a strict xfail: fixing it
fails the test until the entry goes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pycni.net.netlink.kernel import Kernel
from pycni.net.netlink.rtnl.native import NativeKernel
from pycni.net.netlink.rtnl.pyroute2_adapter import Pyroute2Kernel
from tests import harness
from tests.kernel_contract import CASES, EXPECTED, on_fake, on_kernel

KNOWN_DIFFERENCES = {
    ("pyroute2", "policy_rules"): (
        "pyroute2 gives a rule added without a priority the priority 32000 (its own default) where "
        "the kernel picks one below the first non-zero rule; pycni's only caller, "
        "plugins/meta/sbr/policy.py, always passes a priority"
    ),
}


def _open(kind: str) -> Kernel:
    return NativeKernel() if kind == "native" else Pyroute2Kernel.open()


def _cases() -> list[Any]:
    out = []
    for kind in ("native", "pyroute2"):
        for name in sorted(CASES):
            why = KNOWN_DIFFERENCES.get((kind, name))
            marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
            out.append(pytest.param(kind, name, marks=marks, id=f"{kind}-{name}"))
    return out


@pytest.fixture
def namespaces(node: harness.Namespace, pod_factory: Any) -> Iterator[tuple[Any, Any]]:
    yield node, pod_factory()


@pytest.mark.kernel
@pytest.mark.parametrize(("kind", "name"), _cases())
def test_kernel_answers_as_recorded_and_as_the_fake(
    kind: str, name: str, namespaces: tuple[harness.Namespace, harness.Namespace]
) -> None:
    node, pod = namespaces
    real = on_kernel(CASES[name], node, pod, lambda: _open(kind))
    assert real == EXPECTED[name]
    assert on_fake(CASES[name]) == real
