"""A daemon that cannot be starved: slow clients, a hung plugin and an fd flood at once.

Real daemon processes with ``--workers 2``; real pods through the installed entry points.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pycni.daemon import client
from pycni.entrypoints import install
from tests import harness
from tests.integration.daemon_proc import start_daemon

pytestmark = pytest.mark.kernel


def slow_feeder(sock_path: str, stop: threading.Event) -> None:
    """Connect and send a request a byte every 3 seconds (the daemon cuts it off at 10 s)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock_path)
    try:
        for byte in b"pCNI\x02\x01\x00\x00":
            conn.send(bytes([byte]))
            if stop.wait(3.0):
                return
    except OSError:
        return  # answered and closed by the daemon
    finally:
        conn.close()


def sleepers(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if tag.encode() in cmdline:
                found.append(int(entry))
    return found


def test_slow_clients_and_a_hung_ipam_do_not_starve_other_calls(
    node: harness.Namespace, pod_factory: Any, tmp_state: harness.State, short_dir: Path
) -> None:
    bin_dir = short_dir / "bin"
    sock = str(short_dir / "run" / "d.sock")
    install.install(bin_dir, socket_path=sock, names=["bridge", "host-local"])
    tag = f"{random.randint(100, 500)}.{random.randint(100000, 999999)}"
    hung_ipam = bin_dir / "sleepy-ipam"  # exec'd: not a pycni entry point
    hung_ipam.write_text(f"#!/bin/sh\nexec sleep {tag}\n")
    hung_ipam.chmod(0o755)
    base = {"cniVersion": "1.0.0", "name": "starve", "type": "bridge", "bridge": "cnistv0"}
    fast_config = {
        **base,
        "ipam": {
            "type": "host-local",
            "subnet": "10.67.0.0/24",
            "dataDir": str(tmp_state.data_dir),
        },
    }
    hung_config = {**base, "ipam": {"type": "sleepy-ipam"}}
    hung_pod, fast_pod = pod_factory(), pod_factory()

    def run(command: str, config: dict[str, Any], cid: str, pod: harness.Namespace) -> Any:
        with node.entered():
            return harness.exec_plugin(
                bin_dir / "bridge", command, config, container_id=cid, netns=pod.path,
                cni_path=str(bin_dir),
            )  # fmt: skip

    daemon = start_daemon(short_dir, "--workers", "2", "--call-timeout", "4")
    stop = threading.Event()
    feeders = [threading.Thread(target=slow_feeder, args=(sock, stop)) for _ in range(2)]
    hung: dict[str, Any] = {}

    def run_hung() -> None:
        started = time.monotonic()
        hung["run"] = run("ADD", hung_config, "hungpod", hung_pod)
        hung["elapsed"] = time.monotonic() - started

    hung_thread = threading.Thread(target=run_hung)
    try:
        for thread in feeders:
            thread.start()
        hung_thread.start()
        deadline = time.monotonic() + 10
        while not sleepers(tag):  # the IPAM plugin hangs now
            assert time.monotonic() < deadline, "the hung IPAM plugin never started"
            time.sleep(0.05)

        started = time.monotonic()
        assert client.ping(sock, timeout=5)["status"] == "ok"
        ping_time = time.monotonic() - started
        started = time.monotonic()
        added = run("ADD", fast_config, "fastpod", fast_pod).ok()
        add_time = time.monotonic() - started
        # neither waited for the hung call (its deadline is 4 s): it is still running, and
        # the bounds are loose (a loaded 2-core machine can take a second for a plain ADD)
        assert hung_thread.is_alive(), (ping_time, add_time)
        assert ping_time < 3.0, ping_time
        assert add_time < 3.0, add_time
        assert added.json["ips"]

        hung_thread.join(timeout=30)
        result = hung["run"]
        assert result.code == 1, result
        err = json.loads(result.stdout)
        assert err["code"] == 999, err
        assert "deadline" in err["msg"] or "timed out" in err["msg"], err
        assert 3.5 < hung["elapsed"] < 10, hung["elapsed"]
        # Nothing of the hung ADD is left: no pod interface, no host veth, no sleeper.
        assert "eth0" not in hung_pod.links()
        assert len([n for n in node.links() if n.startswith("veth")]) == 1  # fastpod's
        assert sleepers(tag) == []
        run("DEL", fast_config, "fastpod", fast_pod).ok()
        assert tmp_state.reservations("starve") == []
        assert [n for n in node.links() if n.startswith("veth")] == []
    finally:
        stop.set()
        for thread in feeders:
            thread.join(timeout=30)
        hung_thread.join(timeout=30)
        for pid in sleepers(tag):
            os.kill(pid, signal.SIGKILL)
        assert daemon.stop() == 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


@pytest.mark.parametrize("limit", ["emfile", "connection-limit"])
def test_an_fd_flood_is_survived_without_spinning(limit: str, short_dir: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    sock = str(short_dir / "run" / "d.sock")
    # "emfile": allow more connections than fds, so accept() itself fails with EMFILE.
    extra = ["--max-connections", "5000"] if limit == "emfile" else []
    daemon = start_daemon(short_dir, "--workers", "2", *extra, preexec=limit_fds)
    conns: list[socket.socket] = []
    try:
        for _ in range(1000):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.setblocking(False)
            if conn.connect_ex(sock) == 0:
                conns.append(conn)
            else:  # the backlog is full: exactly what an entry point would see
                conn.close()
        assert len(conns) > 100
        time.sleep(0.5)
        before = cpu_seconds(daemon.proc.pid)
        time.sleep(2.0)
        used = cpu_seconds(daemon.proc.pid) - before
        assert used / 2.0 < 0.05, f"daemon used {used:.2f}s of CPU in 2s"
        log = (short_dir / "daemon.log").read_text()
        expected = "Too many open files" if limit == "emfile" else "connection limit"
        assert "not accepting connections" in log and expected in log, log[-2000:]
        assert log.count("not accepting connections") <= 10, log[-2000:]  # a line per episode
    finally:
        for conn in conns:
            conn.close()
    deadline = time.monotonic() + 15
    while True:
        try:
            assert client.ping(sock, timeout=2)["status"] == "ok"
            break
        except (OSError, client.DaemonUnavailable):
            assert time.monotonic() < deadline, "the daemon did not come back"
            time.sleep(0.1)
    install.install(short_dir / "c", socket_path=sock, form="c", names=["loopback"])
    env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    before_calls = client.stats(sock)["counts"]["calls"]
    proc = subprocess.run(
        [str(short_dir / "c" / "loopback")], env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 0 and b"supportedVersions" in proc.stdout
    deadline = time.monotonic() + 20  # a call is counted just after its reply
    while client.stats(sock)["counts"]["calls"] < before_calls + 1:
        assert time.monotonic() < deadline, "the call did not go through the daemon"
        time.sleep(0.05)
    assert daemon.stop() == 0
