"""Nobody on the node can stall CNI calls through the daemon (issue 24, items 3 and 5).

- user ``nobody`` holds ten times the daemon's fd limit of idle connections to its metrics
  port: the metrics endpoint keeps at most a few fds, ADDs through both entry-point forms
  complete (forwarded, or in-process after the documented bound), and the daemon serves
  calls again once the connections are gone;
- at the connection limit the pause/resume log lines are rate-limited;
- uid 0 in a child user namespace is not served (it runs the plugin itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.daemon import client, metrics_http, protocol
from pycni.entrypoints import install
from tests import harness
from tests.integration.daemon_proc import DaemonProc, start_daemon

pytestmark = pytest.mark.kernel

FD_LIMIT = 256
FORMS = ("c", "python")
SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's interpreter may sit where nobody cannot read

# Run as nobody: open N connections in batches of 64 (each batch given a second to be
# accepted, as a patient attacker would), report, then hold every fd, idle, until stdin closes.
ATTACKER = """
import os, resource, select, socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
while len(held) < count:
    batch = []
    for _ in range(min(64, count - len(held))):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        batch.append(s)
    poller = select.poll()
    for s in batch:
        poller.register(s, select.POLLOUT)
    poller.poll(1000)
    held += batch
print("holding", len(held), os.getuid(), flush=True)
sys.stdin.read()
"""


def _bound_seconds() -> float:
    """The documented most an entry point waits before it runs the plugin itself."""
    return (protocol.CONNECT_TIMEOUT_MS + protocol.ACK_TIMEOUT_MS) / 1000


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _metrics_port(log: Path) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"metrics on 127\.0\.0\.1:(\d+)", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no metrics line in the log:\n{log.read_text()}")


def _scrape(node: harness.Namespace, port: int) -> str:
    """One scrape, retried a few times as Prometheus would (an idle flood may close a
    connection that had not sent its request yet)."""
    failures = []
    for _ in range(5):
        proc = _scrape_once(node, port)
        if proc.returncode == 0 and proc.stdout:
            return proc.stdout
        failures.append(proc.stderr.strip().splitlines()[-1:] or ["empty answer"])
        time.sleep(0.2)
    raise AssertionError(f"no scrape in 5 tries: {failures}")


def _scrape_once(node: harness.Namespace, port: int) -> subprocess.CompletedProcess[str]:
    code = (
        "import socket,sys\n"
        f"s=socket.create_connection(('127.0.0.1',{port}),timeout=20)\n"
        "s.sendall(b'GET /metrics HTTP/1.0\\r\\n\\r\\n')\n"
        "d=b''\n"
        "while c:=s.recv(65536): d+=c\n"
        "sys.stdout.write(d.decode())\n"
    )
    return node.run(SYSTEM_PYTHON, "-c", code, timeout=60, check=False)


@pytest.fixture
def spawn(short_dir: Path) -> Iterator[Callable[..., DaemonProc]]:
    """start_daemon on ``short_dir``; whatever a failing test left running is killed after."""
    started: list[DaemonProc] = []

    def make(*extra: str, **kw: Any) -> DaemonProc:
        daemon = start_daemon(short_dir, *extra, **kw)
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        if daemon.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(daemon.proc.pid, signal.SIGCONT)  # a SIGSTOPped one
            daemon.proc.kill()
            daemon.proc.wait(timeout=30)


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_idle_metrics_connections_from_nobody_do_not_stall_calls(
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
    short_dir: Path,
    spawn: Callable[..., DaemonProc],
) -> None:
    node.run("ip", "link", "set", "lo", "up")
    sock = str(short_dir / "run" / "d.sock")
    for form in FORMS:
        install.install(
            short_dir / form, socket_path=sock, form=form, names=["bridge", "host-local"]
        )
    conf = {
        "cniVersion": "1.0.0", "name": "stall", "type": "bridge", "bridge": "cnistall0",
        "ipam": {"type": "host-local", "subnet": "10.69.0.0/24",
                 "dataDir": str(tmp_state.data_dir)},
    }  # fmt: skip
    pods = {form: pod_factory() for form in FORMS}

    def run(form: str, command: str) -> harness.PluginRun:
        with node.entered():
            return harness.exec_plugin(
                short_dir / form / "bridge", command, conf, container_id=f"stall{form}",
                netns=pods[form].path, cni_path=str(short_dir / form),
                timeout=_bound_seconds() + 60,  # generous for the in-process run itself
            )  # fmt: skip

    daemon = spawn(
        "--metrics", "127.0.0.1:0", "--log-level", "INFO",
        netns=node.path, preexec=_limit_fds,
    )  # fmt: skip
    attacker = None
    try:
        port = _metrics_port(daemon.log)
        assert "pycni_workers" in _scrape(node, port)
        count = 10 * FD_LIMIT
        attacker = subprocess.Popen(
            ["nsenter", f"--net={node.path}", "--", "setpriv", "--reuid=65534",
             "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c", ATTACKER, str(port),
             str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (count + 64,) * 2),
        )  # fmt: skip
        assert attacker.stdout is not None
        line = attacker.stdout.readline().split()
        assert line[:3] == ["holding", str(count), "65534"], line
        # The endpoint keeps at most its cap open, however many nobody holds.
        deadline = time.monotonic() + 10
        while _open_fds(daemon.proc.pid) > FD_LIMIT // 2:
            assert time.monotonic() < deadline, _open_fds(daemon.proc.pid)
            time.sleep(0.1)

        for form in FORMS:
            added = run(form, "ADD").ok()
            assert added.json["ips"][0]["address"].startswith("10.69.0."), added
            assert "eth0" in pods[form].links()
        assert _open_fds(daemon.proc.pid) < FD_LIMIT // 2
        # While it is held, the endpoint still answers a scraper (oldest connections go).
        assert "pycni_workers" in _scrape(node, port)
    finally:
        if attacker is not None:
            assert attacker.stdin is not None
            attacker.stdin.close()
            attacker.wait(timeout=30)

    # Once they are gone, calls are forwarded again: DEL (idempotent) until the daemon ran one.
    calls = daemon.calls()
    for form in FORMS:
        for _ in range(5):
            run(form, "DEL").ok()
            if daemon.count("calls") > calls:
                break
        calls = daemon.count("calls")
    assert daemon.count("calls") >= 2, daemon.log.read_text()
    assert "pycni_workers" in _scrape(node, port)
    assert tmp_state.reservations("stall") == []
    assert daemon.stop() == 0


def test_pause_and_resume_lines_are_rate_limited(spawn: Callable[..., DaemonProc]) -> None:
    """At --max-connections, every close resumes accepting and the next accept pauses again:
    hundreds of episodes, a handful of log lines (the rest counted in the next line)."""
    daemon = spawn("--max-connections", "4", "--log-level", "INFO")
    held: list[socket.socket] = []
    try:
        episodes = 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline or episodes < 50:
            while len(held) < 6:  # two beyond the limit wait in the backlog
                conn = socket.socket(socket.AF_UNIX)
                conn.connect(daemon.socket_path)
                held.append(conn)
            held.pop(0).close()  # frees a slot: the daemon resumes, accepts, pauses again
            episodes += 1
            time.sleep(0.005)
            assert episodes < 5000
    finally:
        for conn in held:
            conn.close()
    assert client.ping(daemon.socket_path, timeout=20)["status"] == "ok"
    assert daemon.stop() == 0
    text = daemon.log.read_text()
    pauses = text.count("not accepting connections: connection limit of 4 reached")
    resumes = text.count("accepting connections again")
    assert 1 <= pauses <= 2 and resumes <= 2, text  # 10 s apart at most once each
    assert episodes >= 50


@pytest.mark.parametrize("form", FORMS)
def test_root_of_a_child_user_namespace_is_not_served(
    form: str, short_dir: Path, spawn: Callable[..., DaemonProc]
) -> None:
    """uid 0 in `unshare --user --map-root-user` has full CapEff there, none over the
    daemon's objects: the daemon tells it to run the plugin itself, and runs nothing."""
    daemon = spawn()
    install.install(short_dir / form, socket_path=daemon.socket_path, form=form, names=["loopback"])
    calls = daemon.calls()
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--", str(short_dir / form / "loopback")],
        env={"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc
    assert "1.0.0" in json.loads(proc.stdout)["supportedVersions"]  # ran in-process
    assert daemon.count("run_locally", 1) >= 1
    assert daemon.calls() == calls
    assert daemon.stop() == 0


def test_metrics_server_caps_connections_and_closes_idle_ones() -> None:
    """The endpoint's own bounds, without a daemon: a cap (the oldest goes) and a deadline."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0pycni-metrics-test-" + os.urandom(4).hex())
    listener.listen(64)
    server = metrics_http.MetricsHTTPServer(
        listener, lambda: b"x 1\n", max_connections=4, deadline=1.0
    )
    server.start()
    idle = []
    try:
        for _ in range(40):
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(listener.getsockname())
            idle.append(conn)
        deadline = time.monotonic() + 10
        while server.evicted < 36:
            assert time.monotonic() < deadline, server.evicted
            time.sleep(0.02)
        assert server.open_connections <= 4
        scraper = socket.socket(socket.AF_UNIX)
        scraper.settimeout(10)
        scraper.connect(listener.getsockname())
        scraper.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := scraper.recv(4096):
            data += chunk
        scraper.close()
        assert data.startswith(b"HTTP/1.0 200 OK") and data.endswith(b"\r\n\r\nx 1\n"), data
        deadline = time.monotonic() + 10  # the deadline closes the idle ones left
        while server.open_connections:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert all(conn.recv(1) == b"" for conn in idle[-4:])
    finally:
        for conn in idle:
            conn.close()
        server.close()


@pytest.mark.parametrize("form", FORMS)
def test_a_stopped_daemon_gets_no_call_and_never_runs_it_twice(
    form: str, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State,
    short_dir: Path, spawn: Callable[..., DaemonProc],
) -> None:  # fmt: skip
    """SIGSTOP the daemon: connections still complete into its backlog. The entry point gets
    no acknowledgement, runs the ADD in-process, and the daemon, resumed, finds only a HELLO:
    one address reserved, one veth, and no call counted by the daemon."""
    daemon = spawn()
    install.install(
        short_dir / form, socket_path=daemon.socket_path, form=form,
        names=["bridge", "host-local"],
    )  # fmt: skip
    conf = {
        "cniVersion": "1.0.0", "name": "stopped", "type": "bridge", "bridge": "cnistop0",
        "ipam": {"type": "host-local", "subnet": "10.70.0.0/24",
                 "dataDir": str(tmp_state.data_dir)},
    }  # fmt: skip
    pod = pod_factory()

    def run(command: str) -> harness.PluginRun:
        with node.entered():
            return harness.exec_plugin(
                short_dir / form / "bridge", command, conf, container_id="stopped1",
                netns=pod.path, cni_path=str(short_dir / form),
                timeout=_bound_seconds() + 60,
            )  # fmt: skip

    calls = daemon.calls()
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        added = run("ADD").ok()
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert added.json["ips"][0]["address"] == "10.70.0.2/24"
    # the resumed daemon finds the connection: a HELLO and an end-of-file (a bad request), or
    # a caller already gone (refused at accept); counted, never run
    deadline = time.monotonic() + 20
    while daemon.count("bad_requests") + daemon.count("refused") < 1:
        assert time.monotonic() < deadline, client.stats(daemon.socket_path)
        time.sleep(0.05)
    assert daemon.calls() == calls
    assert tmp_state.reservations("stopped") == ["10.70.0.2"]
    assert len([n for n in node.links() if n.startswith("veth")]) == 1
    run("DEL").ok()
    assert tmp_state.reservations("stopped") == []
    assert daemon.stop() == 0
