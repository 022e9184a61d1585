"""`pycni daemon --metrics`: the Prometheus text parses, and its numbers are the calls made —
successful ADDs and DELs, one failed ADD (by its CNI error code) and one rolled-back ADD."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pycni.fast import client, install, protocol
from tests import harness
from tests.integration.test_daemon_pods import stop_daemon, work  # noqa: F401
from tests.integration.test_daemon_rollback import send_and_vanish, wait_for_note

pytestmark = pytest.mark.kernel

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(path: str) -> str:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(path)
    conn.sendall(b"GET /metrics HTTP/1.0\r\nHost: pycni\r\n\r\n")
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    return body.decode()


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(data: Samples, name: str, **labels: str) -> float:
    return data.get((name, frozenset(labels.items())), 0.0)


def total(data: Samples, name: str, **labels: str) -> float:
    """Sum over every label set that contains ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in data.items() if n == name and want <= ls)


def start(home: harness.Namespace, sock: str, metrics: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["nsenter", f"--net={home.path}", "--", sys.executable, "-m", "pycni.cli.daemon_cmd",
             "--socket", sock, "--workers", "4", "--metrics", f"unix:{metrics}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while not os.path.exists(metrics) or not os.path.exists(sock):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    client.ping(sock, timeout=10)
    return proc


def test_metrics_count_the_calls_errors_and_rollbacks(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    tmp_state: harness.State,
    work: Path,  # noqa: F811
) -> None:
    home = pod_factory()
    pods = [pod_factory() for _ in range(4)]
    sock = str(work / "run" / "d.sock")
    metrics = str(work / "metrics.sock")
    bindir = work / "bin"
    install.install(bindir, socket_path=sock, names=["bridge", "host-local"])
    config = {
        "cniVersion": "1.0.0",
        "name": "metered",
        "type": "bridge",
        "bridge": "cnimet0",
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "subnet": "10.77.0.0/24",
            "dataDir": str(tmp_state.data_dir),
        },
    }

    def call(command: str, index: int, conf: dict[str, object]) -> harness.PluginRun:
        with node.entered():
            return harness.exec_plugin(
                bindir / "bridge", command, conf, container_id=f"metpod{index}",
                netns=pods[index].path, cni_path=str(bindir),
            )  # fmt: skip

    daemon = start(home, sock, metrics, work / "daemon.log")
    try:
        first = samples(scrape(metrics))
        info = {dict(ls).get("started_by") for (n, ls) in first if n == "pycni_daemon_info"}
        assert info == {"manual"}
        deadline = time.monotonic() + 10  # our ping may still be finishing
        while value(first, "pycni_calls_in_flight") != 0:
            assert time.monotonic() < deadline, first
            time.sleep(0.05)
            first = samples(scrape(metrics))

        for i in range(3):
            call("ADD", i, config).ok()
        bad = call("ADD", 3, {**config, "mtu": "not-a-number"})
        assert bad.code != 0
        bad_code = int(bad.json["code"])  # type: ignore[call-overload]

        # One ADD whose caller leaves at once: the daemon rolls it back.
        env = {
            "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "metgone", "CNI_NETNS": pods[3].path,
            "CNI_IFNAME": "eth0", "CNI_PATH": str(bindir), "PATH": "/usr/sbin:/usr/bin",
        }  # fmt: skip
        data = protocol.encode_request(
            protocol.KIND_CALL, "bridge", env, json.dumps(config).encode(),
            flags=protocol.FLAG_CALLER_NETNS | protocol.FLAG_TARGET_NETNS,
        )  # fmt: skip
        node_fd = os.open(node.path, os.O_RDONLY)
        pod_fd = os.open(pods[3].path, os.O_RDONLY)
        try:
            send_and_vanish(sock, data, [node_fd, pod_fd])
        finally:
            os.close(node_fd)
            os.close(pod_fd)
        wait_for_note(sock, "rolled back")

        for i in range(3):
            call("DEL", i, config).ok()
        stats = client.stats(sock)["counts"]
        text = scrape(metrics)
    finally:
        stop_daemon(daemon)
    assert not os.path.exists(metrics)  # removed on exit

    got = samples(text)
    hist = "pycni_call_duration_seconds_count"
    assert value(got, hist, plugin="bridge", command="ADD") == 5  # 3 + the failed + the vanished
    assert value(got, hist, plugin="bridge", command="DEL") == 3
    assert total(got, hist) == stats["calls"]
    errors = "pycni_call_errors_total"
    assert value(got, errors, plugin="bridge", command="ADD", code=str(bad_code)) == 1
    assert total(got, errors) == stats["errors"] == 1
    assert value(got, "pycni_daemon_rolled_back_total") == stats["rolled_back"] == 1
    assert value(got, "pycni_daemon_calls_total") == stats["calls"]
    assert value(got, "pycni_calls_queued") == 0
    buckets = "pycni_call_duration_seconds_bucket"
    assert value(got, buckets, plugin="bridge", command="DEL", le="+Inf") == 3
    assert tmp_state.reservations("metered") == []


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "10.1.2.3:1", "relative/path", "unix:rel"])
def test_metrics_refuse_addresses_off_this_node(address: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", str(tmp_path / "d.sock"),
         "--metrics", address],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc
    assert "cannot serve metrics" in proc.stderr
    assert not (tmp_path / "d.sock").exists()
