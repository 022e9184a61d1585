"""Real pods through the daemon: 50 parallel ADDs, a daemon restart, then DEL of them all.

The daemon runs in its own namespace (not the root one, not the node): every host-side
change must land in the caller's (the node's) namespace, which is what this checks too.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pycni.daemon import client
from pycni.entrypoints import install
from tests import harness
from tests.integration.daemon_proc import start_daemon

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

PODS = 50
BRIDGE = "cnifast0"


def calls_counted(sock: str, at_least: int) -> int:
    """The daemon's call count (a call is counted just after its reply: wait a little)."""
    deadline = time.monotonic() + 20
    while (count := int(client.stats(sock)["counts"]["calls"])) < at_least:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return count


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pycni-p"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_parallel_pods_through_the_daemon_survive_a_restart(
    node: harness.Namespace, pod_factory: object, tmp_state: harness.State, work: Path
) -> None:
    home = pod_factory()  # type: ignore[operator]  # the daemon's own namespace
    pods = [pod_factory() for _ in range(PODS)]  # type: ignore[operator]
    sock = str(work / "run" / "d.sock")
    bindir = work / "bin"
    report = install.install(bindir, socket_path=sock, names=["bridge", "host-local"])
    config = {
        "cniVersion": "1.0.0",
        "name": "fastnet",
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "subnet": "10.79.0.0/24",
            "dataDir": str(tmp_state.data_dir),
        },
    }

    def run(command: str, index: int) -> harness.PluginRun:
        with node.entered():
            return harness.exec_plugin(
                bindir / "bridge", command, config, container_id=f"fastpod{index}",
                netns=pods[index].path, cni_path=str(bindir),
            )  # fmt: skip

    daemon = start_daemon(work, "--workers", "8", netns=home.path)
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            adds = list(pool.map(lambda i: run("ADD", i), range(PODS)))
        for result in adds:
            result.ok()
        assert calls_counted(sock, PODS) >= PODS  # they went through the daemon
        assert client.stats(sock)["counts"]["errors"] == 0
    finally:
        assert daemon.stop() == 0

    addresses = [str(r.json["ips"][0]["address"]) for r in adds]  # type: ignore[index]
    assert len(set(addresses)) == PODS
    assert sorted(tmp_state.reservations("fastnet")) == sorted(
        str(ipaddress.ip_interface(a).ip) for a in addresses
    )
    assert BRIDGE in node.links()  # host side in the caller's namespace ...
    assert BRIDGE not in home.links()  # ... not in the daemon's
    for pod, address in zip(pods, addresses, strict=True):
        assert address in pod.addresses("eth0")
    assert pods[0].ping("10.79.0.1")
    assert pods[0].ping(str(ipaddress.ip_interface(addresses[-1]).ip))

    # A new daemon (no state of its own) deletes what the old one added.
    daemon = start_daemon(work, "--workers", "8", netns=home.path)
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            dels = list(pool.map(lambda i: run("DEL", i), range(PODS)))
        for result in dels:
            result.ok()
        assert calls_counted(sock, PODS) >= PODS
    finally:
        assert daemon.stop() == 0
    assert tmp_state.reservations("fastnet") == []
    assert [n for n in node.links() if n.startswith("veth")] == []
    assert all("eth0" not in pod.links() for pod in pods)
    assert report.form in ("c", "python")
    log = (work / "daemon.log").read_text()
    assert log.count(" bridge ADD exit=0 ") == PODS
    assert log.count(" bridge DEL exit=0 ") == PODS
    assert not os.path.exists(sock)
