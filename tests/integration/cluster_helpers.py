"""What the cluster tests (test_cluster*.py) share: the `pycni` command, a cluster made by
`pycni cluster up`, waiting for a condition, and a TCP echo of the peer's address served in
a namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pycni import playground
from pycni.playground import cluster

PYCNI = str(Path(sys.executable).parent / "pycni")

MARKS = [
    pytest.mark.kernel,
    pytest.mark.slow,
    # the cluster execs its own in-process entry points: a daemon-mode run would only repeat
    # these minutes (the flannel plugin itself is covered in both modes by tests/plugins/flannel)
    pytest.mark.skipif(
        os.environ.get("PYCNI_TEST_MODE") == "daemon", reason="same test as in-process"
    ),
]


def pycni(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYCNI, *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    details: Callable[[], str] = lambda: "",
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{details()}")


def echo_server(port: int, *, dual_stack: bool = False) -> str:
    """A script that prints ``ready`` once it listens on ``port`` and answers every
    connection with the address it came from (IPv4 only, or both families on one IPv6
    socket, whose IPv4 peers show as ::ffff:a.b.c.d: unmapped here)."""
    if dual_stack:
        family, address = "socket.AF_INET6", "::"
        v6only = "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)"
    else:
        family, address, v6only = "socket.AF_INET", "0.0.0.0", ""
    return f"""
import socket
s = socket.socket({family})
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
{v6only}
s.bind(("{address}", {port}))
s.listen(64)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(peer[0].removeprefix("::ffff:").encode())
    c.close()
"""


def echo_client(port: int) -> str:
    """A script that connects to each address of its argv on ``port`` and prints
    ``<address> <what the server answered>`` per line."""
    return f"""
import socket, sys
for dst in sys.argv[1:]:
    c = socket.create_connection((dst, {port}), timeout=5)
    print(dst, c.recv(100).decode(), flush=True)
    c.close()
"""


def serve_in(namespace: str, script: str) -> subprocess.Popen[str]:
    """Run the server ``script`` in ``namespace``; returns once it printed ``ready``."""
    proc = subprocess.Popen(
        ["nsenter", f"--net={playground.netns_path(namespace)}", "--",
         sys.executable, "-c", script],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


class PlaygroundCluster:
    """A cluster made by ``pycni cluster --state-dir ROOT up``; ``down`` once at the end."""

    def __init__(self, backend: str, root: Path, prefix: str, family: str = "ipv4") -> None:
        self.backend, self.root, self.prefix, self.family = backend, root, prefix, family
        self.is_down = False

    def state(self) -> cluster.ClusterState:
        return cluster.ClusterState.load(str(self.root))

    def down(self) -> subprocess.CompletedProcess[str]:
        self.is_down = True
        return pycni("cluster", "--state-dir", str(self.root), "down", timeout=180)
