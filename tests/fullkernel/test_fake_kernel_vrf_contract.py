"""The fake kernel's contract for VRFs, real side: the native client on a kernel with the vrf
module answers tests/kernel_contract.py's VRF_CASES as recorded in VRF_EXPECTED, and as
FakeKernel does (tests/unit/test_fake_kernel.py checks the fake against the same record).

The machine's own kernel has no vrf module, so these cases cannot run in the kernel suite
beside the others (tests/integration/test_fake_kernel_contract.py); the full-kernel lane runs
them in its guest.
"""

from __future__ import annotations

from typing import Any

import pytest

from pycni.net.netlink.rtnl.native import NativeKernel
from tests import harness
from tests.kernel_contract import VRF_CASES, VRF_EXPECTED, on_fake, on_kernel

pytestmark = [pytest.mark.kernel]


@pytest.mark.parametrize("name", sorted(VRF_CASES))
def test_kernel_answers_as_recorded_and_as_the_fake(
    name: str, node: harness.Namespace, pod_factory: Any
) -> None:
    real = on_kernel(VRF_CASES[name], node, pod_factory(), NativeKernel)
    assert real == VRF_EXPECTED[name]
    assert on_fake(VRF_CASES[name]) == real
