"""A caller that dies during an ADD leaves no half-made pod: the daemon rolls the ADD back."""

from __future__ import annotations

import array
import json
import os
import socket
import time
from pathlib import Path

import pytest

from pycni.daemon import client, protocol
from pycni.entrypoints import install
from tests import harness
from tests.integration.daemon_proc import start_daemon
from tests.integration.test_daemon_pods import work  # noqa: F401

pytestmark = pytest.mark.kernel


def send_and_vanish(sock_path: str, data: bytes, fds: list[int]) -> None:
    """Send a call with its fds, then close the connection without reading the reply."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock_path)
    conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    conn.close()


def wait_for_note(sock_path: str, *texts: str) -> dict[str, object]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for rec in client.stats(sock_path)["recent"]:
            if any(text in str(rec.get("note", "")) for text in texts):
                return dict(rec)
        time.sleep(0.05)
    raise AssertionError(f"no call noted {texts!r}: {client.stats(sock_path)['recent']}")


def test_add_of_a_vanished_caller_is_rolled_back(
    node: harness.Namespace,
    pod_factory: object,
    tmp_state: harness.State,
    work: Path,  # noqa: F811
) -> None:
    home = pod_factory()  # type: ignore[operator]  # the daemon's own namespace
    pod = pod_factory()  # type: ignore[operator]
    sock = str(work / "run" / "d.sock")
    bin_dir = work / "bin"
    install.install(bin_dir, form="auto", socket_path=sock)
    daemon = start_daemon(work, "--workers", "8", netns=home.path)
    try:
        config = {
            "cniVersion": "1.0.0",
            "name": "vanish",
            "type": "bridge",
            "bridge": "cnivan0",
            "isGateway": True,
            "ipam": {
                "type": "host-local",
                "dataDir": str(tmp_state.data_dir),
                "ranges": [[{"subnet": "10.66.0.0/24"}]],
            },
        }
        env = {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "gone1",
            "CNI_NETNS": pod.path,
            "CNI_IFNAME": "eth0",
            "CNI_PATH": str(bin_dir),
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin"),
        }
        data = protocol.encode_request(
            protocol.KIND_CALL,
            "bridge",
            env,
            json.dumps(config).encode(),
            flags=protocol.FLAG_CALLER_NETNS | protocol.FLAG_TARGET_NETNS,
        )
        node_fd = os.open(node.path, os.O_RDONLY)
        pod_fd = os.open(pod.path, os.O_RDONLY)
        try:
            send_and_vanish(sock, data, [node_fd, pod_fd])
        finally:
            os.close(node_fd)
            os.close(pod_fd)
        # Gone before a worker took the call: dropped, nothing ran. Gone while it ran: the
        # ADD is cancelled or, when it had finished, rolled back with the plugin's DEL.
        record = wait_for_note(sock, "rolled back", "not run", "dropped")
        assert record["command"] == "ADD"
        assert "eth0" not in pod.links()
        assert [n for n in node.links() if n.startswith("veth")] == []
        assert tmp_state.reservations("vanish") == []
        # the daemon is still serving
        assert client.ping(sock)["status"] == "ok"
    finally:
        assert daemon.stop() == 0
