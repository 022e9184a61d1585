"""Through the warm daemon a pod's network namespace lives exactly as long as its holders do.

The daemon keeps sockets per namespace on purpose (nfnetlink, libnftables contexts) and a
socket holds the namespace it was made in; GC counts every namespace the kernel keeps as live
(net/nsscan.py). So once a pod's calls have returned, no thread, fd or socket of the daemon
may be in the pod's namespace, and once its netns file is removed the kernel must destroy it.
The chain here reaches every per-namespace cache: masquerading, port mappings (with the UDP
conntrack flush) and the firewall on nftables on the node, sysctls inside the pod; and the
pod-side work of bandwidth (tc) and sbr (policy routing, under a lock on the pod's netns).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from pycni.daemon import client
from pycni.entrypoints import install
from pycni.net import nsscan
from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from tests import harness
from tests.integration.daemon_proc import DaemonProc
from tests.integration.netns_holders import (
    holders,
    namespace_key,
    nsid_of,
    nsids,
    wait_destroyed,
)

pytestmark = pytest.mark.kernel

NETLINK_NETFILTER = 12


def chain(data: Path) -> bytes:
    ipam = {"type": "host-local", "subnet": "10.213.96.0/24", "dataDir": str(data / "ipam")}
    plugins: list[dict[str, Any]] = [
        {
            "type": "bridge",
            "bridge": "cnirel0",
            "isGateway": True,
            "ipMasq": True,
            "ipMasqBackend": "nftables",
            "ipam": ipam,
        },
        {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": True}},
        {"type": "firewall", "backend": "nftables", "dataDir": str(data / "firewall")},
        {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_ignore": "1"}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        {"type": "sbr"},
    ]
    return json.dumps({"cniVersion": "1.0.0", "name": "relnet", "plugins": plugins}).encode()


def wait_idle(daemon: DaemonProc) -> None:
    """Until no call is in flight (but this stats request): each finished call's fds are
    closed by then (the daemon counts a call once it is over)."""
    deadline = time.monotonic() + 20
    while client.stats(daemon.socket_path)["inFlight"] > 1:
        assert time.monotonic() < deadline, "the daemon never went idle"
        time.sleep(0.02)


def test_a_pod_is_released_when_its_calls_return(
    daemon: DaemonProc,
    short_dir: Path,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
) -> None:
    bindir = short_dir / "bin"
    names = ["bridge", "host-local", "portmap", "firewall", "tuning", "bandwidth", "sbr"]
    install.install(bindir, socket_path=daemon.socket_path, names=names)
    cni = CNIConfig([str(bindir)], cache_dir=str(tmp_state.cache_dir))
    conflist = conf_list_from_bytes(chain(tmp_state.data_dir))
    pod = pod_factory()
    key = namespace_key(pod.path)
    mappings = [
        {"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 18053, "containerPort": 53, "protocol": "udp"},
    ]
    rt = RuntimeConf(
        container_id="released",
        netns=pod.path,
        ifname="eth0",
        capability_args={
            "portMappings": mappings,
            "bandwidth": {"ingressRate": 8_000_000, "ingressBurst": 80_000},
        },
    )
    before = daemon.calls()
    with node.entered():
        cni.add_network_list(conflist, rt)
    assert daemon.count("calls", before + 6) >= before + 6  # the chain ran in the daemon
    assert pod.run("cat", "/proc/sys/net/ipv4/conf/eth0/arp_ignore").stdout.strip() == "1"
    wait_idle(daemon)
    assert holders(daemon.proc.pid, key) == [], "after ADD"
    nsid = nsid_of(node, pod)  # the bridge's veth gave the pod one on the node

    with node.entered():
        cni.del_network_list(conflist, rt)
    # no waiting: a call no undo can follow lets go of the pod before its reply is written
    assert holders(daemon.proc.pid, key) == [], "as DEL returned"

    pod.delete()
    wait_destroyed(node, nsid, "the pod after DEL")
    live = nsscan.scan().keys()  # (a NamespaceScan, not a dict)
    assert key not in live


def test_the_checks_see_a_socket_that_holds_a_pod(
    node: harness.Namespace, pod_factory: Any
) -> None:
    """What the test above relies on can fail: a socket made in a pod is found and keeps the
    pod's namespace after its file is removed, while a twin without one is destroyed."""
    held, twin = pod_factory(), pod_factory()
    for n, pod in enumerate((held, twin)):
        node.run("ip", "link", "add", f"vrel{n}", "type", "veth", "peer", "eth0", "netns", pod.path)
    key = namespace_key(held.path)
    with held.entered():
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        found = holders(os.getpid(), key)
        assert len(found) == 1 and "a socket made in it" in found[0], found
        held_id, twin_id = nsid_of(node, held), nsid_of(node, twin)
        held.delete()
        twin.delete()
        wait_destroyed(node, twin_id, "the twin")  # the kernel's clean-up ran for both
        assert held_id in nsids(node)  # but the socket still holds this one
        assert "vrel0" in node.links()
    finally:
        sock.close()
    wait_destroyed(node, held_id, "the pod once its socket closed")
