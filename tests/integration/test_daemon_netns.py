"""The daemon's namespace handling: each call runs in the caller's netns, with the target fd.

The daemon runs in this test process with a runner that reports what the worker thread
sees (its network namespace and the target fd's), instead of a plugin.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from pycni.daemon import client
from pycni.daemon.server import Daemon
from pycni.net import ns as netns
from pycni.spec.errors import INVALID_NETNS
from tests import harness

pytestmark = pytest.mark.kernel


@dataclass
class Seen:
    stdout: bytes
    stderr: bytes = b""
    exit_code: int = 0


def _inode(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino]


def probe(plugin_type: str, env: Mapping[str, str], stdin: bytes, *, netns_fd: int | None) -> Seen:
    """Report the thread's netns and the target's; optionally wander off and stay there."""
    target = os.fstat(netns_fd) if netns_fd is not None else None
    seen = {
        "thread": _inode(netns.THREAD_NETNS),
        "target": [target.st_dev, target.st_ino] if target else None,
        "container": env.get("CNI_CONTAINERID", ""),
        "start": time.monotonic(),
    }
    if env.get("WANDER"):
        fd = os.open(env["WANDER"], os.O_RDONLY)
        netns.setns(fd)  # a buggy plugin that does not come back
        os.close(fd)
    time.sleep(float(env.get("SLEEP", "0")))
    seen["end"] = time.monotonic()
    return Seen(json.dumps(seen).encode())


@pytest.fixture
def local_daemon() -> Iterator[tuple[Daemon, str]]:
    directory = Path(tempfile.mkdtemp(prefix="pycni-n"))
    sock = str(directory / "d.sock")
    daemon = Daemon(sock, workers=4, runner=probe)
    daemon.plugins = {"probe": "ok"}
    daemon.bind()
    thread = threading.Thread(target=daemon.serve_forever, kwargs={"install_signals": False})
    thread.start()
    try:
        yield daemon, sock
    finally:
        daemon.stop()
        thread.join(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)


def _call(sock: str, caller: str, target: str, **env: str) -> dict[str, object]:
    caller_fd = os.open(caller, os.O_RDONLY)
    target_fd = os.open(target, os.O_RDONLY)
    try:
        reply = client.call(
            sock, "probe", {"CNI_COMMAND": "ADD", **env}, b"{}",
            caller_netns_fd=caller_fd, target_netns_fd=target_fd, timeout=30,
        )  # fmt: skip
    finally:
        os.close(caller_fd)
        os.close(target_fd)
    assert reply.exit_code == 0, reply
    data = json.loads(reply.stdout)
    assert isinstance(data, dict)
    return data


def test_call_runs_in_the_callers_namespace(
    local_daemon: tuple[Daemon, str], node: harness.Namespace, pod_factory: object
) -> None:
    _daemon, sock = local_daemon
    pod = pod_factory()  # type: ignore[operator]
    seen = _call(sock, node.path, pod.path, CNI_CONTAINERID="c1")
    assert seen["thread"] == _inode(node.path)
    assert seen["target"] == _inode(pod.path)
    assert seen["thread"] != _inode("/proc/self/ns/net")


def test_plugin_that_wanders_off_is_brought_back(
    local_daemon: tuple[Daemon, str], node: harness.Namespace, pod_factory: object
) -> None:
    daemon, sock = local_daemon
    pod = pod_factory()  # type: ignore[operator]
    home = _inode("/proc/self/ns/net")
    _call(sock, node.path, pod.path, WANDER=pod.path)
    for _ in range(8):  # every worker starts from home and enters the caller's namespace
        assert _call(sock, node.path, pod.path)["thread"] == _inode(node.path)
    # A caller in the daemon's own namespace: wandering is repaired there too.
    for _ in range(4):
        assert _call(sock, "/proc/self/ns/net", pod.path, WANDER=pod.path)["thread"] == home
    for _ in range(8):
        assert _call(sock, "/proc/self/ns/net", pod.path)["thread"] == home
    # Without the caller's netns fd nothing runs (never in the daemon's namespace by default).
    reply = client.call(sock, "probe", {"CNI_COMMAND": "ADD"}, b"{}")
    assert reply.exit_code == 1
    assert json.loads(reply.stdout)["code"] == INVALID_NETNS
    assert daemon.health()["workers"] == 4
    assert daemon.stats()["counts"]["retired_workers"] == 0


def test_same_container_in_order_others_in_parallel(
    local_daemon: tuple[Daemon, str], node: harness.Namespace, pod_factory: object
) -> None:
    _daemon, sock = local_daemon
    pod = pod_factory()  # type: ignore[operator]
    results: dict[str, list[dict[str, object]]] = {"same": [], "other": []}

    def go(key: str, cid: str) -> None:
        results[key].append(_call(sock, node.path, pod.path, CNI_CONTAINERID=cid, SLEEP="0.3"))

    threads = [threading.Thread(target=go, args=("same", "c-same")) for _ in range(3)]
    threads += [threading.Thread(target=go, args=("other", f"c-{i}")) for i in range(3)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    same = sorted(results["same"], key=lambda s: float(s["start"]))  # type: ignore[arg-type]
    assert len(same) == 3
    for earlier, later in itertools.pairwise(same):
        assert float(later["start"]) >= float(earlier["end"])  # type: ignore[arg-type]
    # Three 0.3 s calls on one container serialise; each call of another container overlaps
    # one of them (read from the calls' own start/end: the wall clock of a loaded machine says
    # nothing). All six serialised would overlap nowhere.
    assert len(results["other"]) == 3
    for other in results["other"]:
        begin, end = float(other["start"]), float(other["end"])  # type: ignore[arg-type]
        assert any(
            begin < float(s["end"]) and float(s["start"]) < end  # type: ignore[arg-type]
            for s in same
        ), (other, same)
    assert time.monotonic() - started < 20  # nothing hung
