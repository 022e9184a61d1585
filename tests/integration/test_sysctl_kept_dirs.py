"""pycni.net.thread_sysctl opens net/ipv4 and net/ipv6 entries relative to a kept directory fd of
the thread's namespace: every read and write must still land in the calling thread's namespace,
also when threads switch namespaces, when a kept namespace is deleted, and for names that
must not take the short way."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pycni.net import thread_sysctl
from tests import harness
from tests.integration.netns_holders import holders, namespace_key, nsid_of, wait_destroyed


def _shown(ns: harness.Namespace, name: str) -> str:
    return str(ns.run("cat", f"/proc/sys/{name}").stdout).strip()


@pytest.mark.kernel
def test_writes_land_in_the_calling_namespace(node: harness.Namespace, pod_factory: Any) -> None:
    pods = [pod_factory() for _ in range(3)]
    key = "net/ipv6/conf/lo/accept_ra"
    for round_ in range(3):  # the same namespaces again: through the kept fds
        for i, ns in enumerate([node, *pods]):
            value = str((i + round_) % 3)
            with ns.entered():
                thread_sysctl.write(key, value)
                assert thread_sysctl.read(key) == value
            assert _shown(ns, key) == value
    for i, ns in enumerate([node, *pods]):
        assert _shown(ns, key) == str((i + 2) % 3)
    with node.entered():
        thread_sysctl.write("net.ipv4.conf.lo.arp_notify", "1")  # the dotted form too
    assert _shown(node, "net/ipv4/conf/lo/arp_notify") == "1"
    assert all(_shown(p, "net/ipv4/conf/lo/arp_notify") == "0" for p in pods)


@pytest.mark.kernel
def test_a_deleted_namespace_never_answers_for_a_new_one(node: harness.Namespace) -> None:
    """More namespaces than fds are kept, each deleted after use: the next namespace (which
    may reuse a deleted one's inode number) still gets its own entries."""
    key = "net/ipv6/conf/lo/accept_ra"
    for i in range(thread_sysctl._KEPT + 4):
        ns = harness.create_namespace(f"sk{i}")
        try:
            with ns.entered():
                assert thread_sysctl.read(key) != "2"
                thread_sysctl.write(key, "2")
                assert thread_sysctl.read(key) == "2"
            assert _shown(ns, key) == "2"
        finally:
            ns.delete()
    assert _shown(node, key) != "2"


@pytest.mark.kernel
def test_missing_entries_and_other_names_behave_as_paths(node: harness.Namespace) -> None:
    with node.entered():
        with pytest.raises(FileNotFoundError):
            thread_sysctl.write("net/ipv4/conf/nosuch0/arp_notify", "1")
        with pytest.raises(FileNotFoundError):
            thread_sysctl.read("net/ipv6/conf/nosuch0/accept_ra")
        thread_sysctl.try_write("net/ipv6/conf/nosuch0/accept_ra", "0")  # best effort: no error
        assert thread_sysctl.read("kernel/ostype") == "Linux"  # outside net/ipv4, net/ipv6
        # a name that climbs out of the family directory takes the full path, never the fd
        assert thread_sysctl.read("net/ipv4/../core/somaxconn") == _shown(
            node, "net/core/somaxconn"
        )
        # an absolute rest would ignore the directory fd: it must stay below /proc/sys
        with pytest.raises(FileNotFoundError):
            thread_sysctl.read("net/ipv4//etc/hostname")
        with pytest.raises(FileNotFoundError):
            thread_sysctl.read("net/ipv6/./../../../etc/hostname/x")


@pytest.mark.kernel
def test_a_kept_directory_does_not_keep_its_namespace_alive(
    node: harness.Namespace, pod_factory: Any
) -> None:
    """The kept fds are of /proc/sys directories, not of the namespace: a pod whose entries
    were read (its directories now kept) is still destroyed once its netns file is removed,
    so GC never sees it live because of them (measured: the daemon's kept fds were once
    suspected of holding pods)."""
    pod = pod_factory()
    node.run("ip", "link", "add", "vkept0", "type", "veth", "peer", "eth0", "netns", pod.path)
    key = namespace_key(pod.path)
    with pod.entered():
        for _ in range(2):  # twice: a first open may meet (and drop) the kept fd of a gone
            # namespace whose inode number this pod got; the second keeps this pod's own
            thread_sysctl.read("net/ipv4/conf/eth0/arp_ignore")
            thread_sysctl.read("net/ipv6/conf/eth0/accept_dad")
    kept = [k for k in thread_sysctl._kept if k[:2] == key]
    assert len(kept) == 2, thread_sysctl._kept
    assert holders(os.getpid(), key) == []
    nsid = nsid_of(node, pod)
    pod.delete()
    wait_destroyed(node, nsid, "a pod whose sysctl directories are kept")
    assert all(k in thread_sysctl._kept for k in kept)  # still kept, holding nothing
