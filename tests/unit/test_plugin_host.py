"""The plugin seam (pycni.skel.host): the real host and the fake one offer the same calls,
skel hands requests the real one unless told otherwise, and the fake refuses what it does not
hold."""

from __future__ import annotations

import pytest

from pycni.net.netlink.fake_kernel import FakeKernel
from pycni.net.ns import NetNSNotFound
from pycni.net.sysctl import THREAD
from pycni.skel.base import Request
from pycni.skel.fake_host import FakeHost
from pycni.skel.host import REAL_HOST, Host, RealHost
from tests.plugin_logic import POD, failed


def test_both_hosts_offer_every_call_of_the_protocol() -> None:
    protocol = {n for n in vars(Host) if not n.startswith("_")}
    assert {"node", "pod", "open_netns", "sysctl", "delegate", "locked"} <= protocol
    assert protocol <= set(dir(RealHost)) and protocol <= set(dir(FakeHost))


def test_a_request_works_on_this_machine_unless_told_otherwise() -> None:
    req = Request("ADD", "c", "/run/netns/x", "eth0", "", [], {}, b"", {})
    assert req.host is REAL_HOST
    assert REAL_HOST.sysctl(FakeKernel(FakeHost().node_ns)) is THREAD


def test_the_fake_knows_only_the_pods_it_was_given() -> None:
    host = FakeHost()
    with pytest.raises(NetNSNotFound):
        host.open_netns("/run/netns/nosuch")
    pod = host.add_pod(POD)
    with host.open_netns(POD) as netns, host.pod(netns) as kernel:
        assert netns.fd == pod.fd and netns.path == POD
        assert isinstance(kernel, FakeKernel) and kernel.ns is pod
        assert host.open_kernels == 1
        assert host.sysctl(kernel) is pod.sysctl
    assert host.open_kernels == 0
    with pytest.raises(OSError):
        host.open_netns(POD, fd=4)  # a real descriptor is no fake namespace


def test_a_failed_call_closes_what_it_was_handed() -> None:
    host = FakeHost()
    host.add_pod(POD)
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "dummy", "ipam": {"type": "static"}}
    before = [x.name for x in host.kernel(POD).links()]
    # static hands out no address: dummy fails after making its link (call() checks that
    # every Kernel handed out was closed)
    assert failed(host, "dummy", "ADD", conf) == "IPAM plugin returned missing IP config"
    assert host.delegations == [("static", "ADD"), ("static", "DEL")]  # ADD, then its undo
    assert [x.name for x in host.kernel(POD).links()] == before


def test_the_pod_lock_is_not_taken_twice() -> None:
    host = FakeHost()
    host.add_pod(POD)
    with (
        host.open_netns(POD) as netns,
        host.locked(netns),
        pytest.raises(AssertionError),
        host.locked(netns),
    ):
        pass
