"""What the demo proves: pings between namespaces and HTTP through the host port."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pycni.net.ns import NetNS
from pycni.record import record

T = TypeVar("T")


@record
class Check:
    name: str
    ok: bool
    detail: str = ""


def _in_namespace(path: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` on a fresh thread inside the namespace ``path`` (its sockets live there)."""
    box: dict[str, T] = {}
    errors: list[BaseException] = []

    def body() -> None:
        try:
            with NetNS.open(path) as ns, ns.entered():
                box["value"] = fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box["value"]


def ping(ns_path: str, address: str, timeout: float = 2.0) -> bool:
    tool = shutil.which("ping")
    if tool is None:
        return False
    proc = subprocess.run(
        [
            "nsenter",
            f"--net={ns_path}",
            "--",
            tool,
            "-4",
            "-c",
            "1",
            "-W",
            str(int(timeout)),
            address,
        ],
        capture_output=True,
        check=False,
        timeout=timeout + 5,
    )
    return proc.returncode == 0


def ping_matrix(sources: dict[str, str], targets: dict[str, str]) -> dict[tuple[str, str], bool]:
    """(source name, target name) → reachable, for every pair of different names, in parallel."""
    pairs = [(s, t) for s in sources for t in targets if s != t]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: ping(sources[p[0]], targets[p[1]]), pairs))
    return dict(zip(pairs, results, strict=True))


def http_get(ns_path: str, host: str, port: int, timeout: float = 3.0) -> str:
    """GET / from inside ``ns_path``; returns the status line and body's first line."""

    def fetch() -> str:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            chunks = []
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        text = b"".join(chunks).decode(errors="replace")
        head, _, body = text.partition("\r\n\r\n")
        status = head.splitlines()[0] if head else "(no answer)"
        first = body.strip().splitlines()[0] if body.strip() else ""
        return f"{status} | {first}"

    return _in_namespace(ns_path, fetch)


def wait_listening(ns_path: str, host: str, port: int, deadline: float = 5.0) -> bool:
    """Wait until something accepts connections on host:port inside the namespace."""

    def probe() -> bool:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    return _in_namespace(ns_path, probe)
