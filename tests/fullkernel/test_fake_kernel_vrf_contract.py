"""The fake kernel's contract for VRFs, real side: the native client on a kernel with the vrf
module answers tests/kernel_contract.py's VRF_CASES as recorded in VRF_EXPECTED, and as
FakeKernel does (tests/unit/test_fake_kernel.py checks the fake against the same record).

The machine's own kernel has no vrf module, so these cases cannot run in the kernel suite
beside the others (tests/integration/test_fake_kernel_contract.py); the full-kernel lane runs
them in its guest.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from pycni.net.netlink.fake_kernel import FakeHost, FakeKernel
from pycni.net.netlink.rtnl.native import NativeKernel
from pycni.net.ns import entered_fd
from pycni.net.procsys import THREAD
from tests import harness
from tests.kernel_contract import VRF_CASES, VRF_EXPECTED, Side

pytestmark = [pytest.mark.kernel]


class _EnteringSysctl:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, name: str) -> str:
        with entered_fd(self.fd):
            return THREAD.read(name)

    def write(self, name: str, value: str) -> None:
        with entered_fd(self.fd):
            THREAD.write(name, value)


@pytest.mark.parametrize("name", sorted(VRF_CASES))
def test_kernel_answers_as_recorded_and_as_the_fake(
    name: str, node: harness.Namespace, pod_factory: Any
) -> None:
    pod = pod_factory()
    with node.entered():
        node_kernel = NativeKernel()
    with pod.entered():
        pod_kernel = NativeKernel()
    node_fd = os.open(node.path, os.O_RDONLY)
    pod_fd = os.open(pod.path, os.O_RDONLY)
    try:
        side = Side(
            node_kernel,
            pod_kernel,
            node_fd,
            pod_fd,
            _EnteringSysctl(node_fd),
            _EnteringSysctl(pod_fd),
        )
        real = VRF_CASES[name](side)
    finally:
        node_kernel.close()
        pod_kernel.close()
        os.close(node_fd)
        os.close(pod_fd)
    host = FakeHost()
    fake_node, fake_pod = host.namespace(), host.namespace()
    fake = VRF_CASES[name](
        Side(
            FakeKernel(fake_node),
            FakeKernel(fake_pod),
            fake_node.fd,
            fake_pod.fd,
            fake_node.sysctl,
            fake_pod.sysctl,
        )
    )
    assert real == VRF_EXPECTED[name]
    assert fake == real
