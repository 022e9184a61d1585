"""`pycni daemon --metrics`: the Prometheus text parses, and its numbers are the calls made —
successful ADDs and DELs, one failed ADD (by its CNI error code) and one rolled-back ADD."""

from __future__ import annotations

import array
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

from pycni.daemon import client, protocol
from pycni.entrypoints import install
from tests import harness
from tests.integration.daemon_proc import start_daemon
from tests.integration.test_daemon_pods import work  # noqa: F401

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


def bridge_request(cid: str, netns: str, bindir: Path, config: dict[str, object]) -> bytes:
    env = {
        "CNI_COMMAND": "ADD", "CNI_CONTAINERID": cid, "CNI_NETNS": netns,
        "CNI_IFNAME": "eth0", "CNI_PATH": str(bindir), "PATH": "/usr/sbin:/usr/bin",
    }  # fmt: skip
    return protocol.encode_request(
        protocol.KIND_CALL, "bridge", env, json.dumps(config).encode(),
        flags=protocol.FLAG_CALLER_NETNS | protocol.FLAG_TARGET_NETNS,
    )  # fmt: skip


def leave_after(sock: str, data: bytes, caller_ns: str, target_ns: str, hold: float) -> None:
    """Send a call with its namespace fds, wait ``hold`` seconds, hang up without reading."""
    fds = [os.open(caller_ns, os.O_RDONLY), os.open(target_ns, os.O_RDONLY)]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock)
        conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        time.sleep(hold)
    finally:
        conn.close()
        for fd in fds:
            os.close(fd)


def wait_for_call(sock: str, cid: str) -> str:
    """The note of the call for ``cid`` once the daemon finished it ("" if it was delivered)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for rec in client.stats(sock)["recent"]:
            if rec.get("container_id") == cid:  # recorded once the daemon is done with it
                return str(rec.get("note", ""))
        time.sleep(0.02)
    raise AssertionError(f"the call for {cid} never finished: {client.stats(sock)['recent']}")


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

    daemon = start_daemon(work, "--metrics", f"unix:{metrics}", netns=home.path)
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

        # ADDs whose caller leaves: gone before a worker took it, it is not run; gone while it
        # ran, it is rolled back. Leave a little later each time until one is rolled back.
        vanished = []
        for attempt in range(30):
            cid = f"metgone{attempt}"
            vanished.append(cid)
            request = bridge_request(cid, pods[3].path, bindir, config)
            leave_after(sock, request, node.path, pods[3].path, hold=attempt * 0.002)
            note = wait_for_call(sock, cid)
            if "rolled back" in note:
                break
        else:
            raise AssertionError("no ADD of a caller that left was rolled back")
        for cid in vanished:  # those delivered before the caller left are DELeted here
            with node.entered():
                harness.exec_plugin(
                    bindir / "bridge", "DEL", config, container_id=cid, netns=pods[3].path,
                    cni_path=str(bindir),
                ).ok()  # fmt: skip

        for i in range(3):
            call("DEL", i, config).ok()
        stats = client.stats(sock)["counts"]
        # The text is rendered at most once a second: wait for one rendered after the calls.
        deadline = time.monotonic() + 10
        while value(samples(text := scrape(metrics)), "pycni_daemon_calls_total") < stats["calls"]:
            assert time.monotonic() < deadline, text
            time.sleep(0.1)
    finally:
        assert daemon.stop() == 0
    assert not os.path.exists(metrics)  # removed on exit

    got = samples(text)
    hist = "pycni_call_duration_seconds_count"
    # 3 + the failed one + those whose caller left
    assert value(got, hist, plugin="bridge", command="ADD") == 4 + len(vanished)
    assert value(got, hist, plugin="bridge", command="DEL") == 3 + len(vanished)
    assert total(got, hist) == stats["calls"]
    errors = "pycni_call_errors_total"
    assert value(got, errors, plugin="bridge", command="ADD", code=str(bad_code)) == 1
    assert total(got, errors) == stats["errors"] == 1
    assert value(got, "pycni_daemon_rolled_back_total") == stats["rolled_back"] == 1
    assert value(got, "pycni_daemon_calls_total") == stats["calls"]
    assert value(got, "pycni_calls_queued") == 0
    buckets = "pycni_call_duration_seconds_bucket"
    assert value(got, buckets, plugin="bridge", command="DEL", le="+Inf") == 3 + len(vanished)
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


SQUATTER = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("bound", flush=True)
sys.stdin.read()  # until the test lets go
"""


def scrape_tcp(node: harness.Namespace, port: int) -> bytes | None:
    """GET /metrics on 127.0.0.1:port in ``node``'s namespace; None when nothing answers."""
    with node.entered():
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            return None
    try:
        conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        return data
    except OSError:
        return None
    finally:
        conn.close()


def test_a_metrics_port_taken_by_another_user_never_stops_the_daemon(
    node: harness.Namespace,
    work: Path,  # noqa: F811
) -> None:
    """User nobody binds the metrics port first: the daemon used to exit ("Address already
    in use") before it served the CNI socket. Now it serves calls, warns, and takes the port
    once it is free."""
    with socket.socket() as probe, node.entered():
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    squatter = subprocess.Popen(
        ["nsenter", f"--net={node.path}", "--", "setpriv", "--reuid=65534", "--regid=65534",
         "--clear-groups", sys.executable, "-c", SQUATTER, str(port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    daemon = None
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == b"bound\n"
        daemon = start_daemon(work, "--metrics", f"127.0.0.1:{port}", netns=node.path)
        assert client.ping(daemon.socket_path)["status"] == "ok"  # the CNI socket is served
        log = daemon.log.read_text()
        assert f"cannot serve metrics on 127.0.0.1:{port} yet" in log and "retrying" in log, log
        squatter.communicate(b"", timeout=30)  # it lets go of the port
        deadline = time.monotonic() + 60  # retried every second
        while not (got := scrape_tcp(node, port) or b"").startswith(b"HTTP/1.0 200"):
            assert time.monotonic() < deadline, daemon.log.read_text()
            assert daemon.proc.poll() is None, daemon.log.read_text()
            time.sleep(0.1)
        assert b"pycni_daemon_info" in got
        assert f"metrics on 127.0.0.1:{port} (after" in daemon.log.read_text()
    finally:
        if squatter.poll() is None:
            squatter.kill()
            squatter.wait()
        if daemon is not None:
            assert daemon.stop() == 0
