"""The warm daemon and the entry points, end to end: a real daemon process on a tmp socket.

These calls are VERSION and hand-made requests: nothing here changes the kernel.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pycni.daemon import client, protocol
from pycni.entrypoints import install
from pycni.spec.errors import DECODING_FAILURE, INVALID_NETNS, IO_FAILURE, TRY_AGAIN_LATER
from tests.integration.daemon_proc import DaemonProc, start_daemon

FORMS = ("c", "python")


def run_version(entry: Path) -> subprocess.CompletedProcess[bytes]:
    env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run([str(entry)], env=env, capture_output=True, timeout=60, check=False)


def assert_version_answer(proc: subprocess.CompletedProcess[bytes]) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert "1.0.0" in answer["supportedVersions"]


@pytest.mark.parametrize("form", FORMS)
def test_version_through_the_daemon(form: str, daemon: DaemonProc, short_dir: Path) -> None:
    report = install.install(
        short_dir / form, socket_path=daemon.socket_path, form=form, names=["loopback"]
    )
    assert report.form == form
    before = daemon.calls()
    assert_version_answer(run_version(short_dir / form / "loopback"))
    assert daemon.count("calls", before + 1) == before + 1  # it went through the daemon
    recent = client.stats(daemon.socket_path)["recent"][-1]
    assert (recent["plugin_type"], recent["command"], recent["exit_code"]) == (
        "loopback",
        "VERSION",
        0,
    )


@pytest.mark.parametrize("form", FORMS)
def test_version_without_a_daemon_runs_in_process(form: str, short_dir: Path) -> None:
    missing = str(short_dir / "nothing.sock")
    install.install(short_dir / form, socket_path=missing, form=form, names=["loopback"])
    assert_version_answer(run_version(short_dir / form / "loopback"))
    # A stale socket file (daemon gone, ECONNREFUSED) also falls back.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(missing)
    stale.close()
    assert_version_answer(run_version(short_dir / form / "loopback"))


def test_inprocess_form_does_not_use_the_daemon(daemon: DaemonProc, short_dir: Path) -> None:
    install.install(
        short_dir / "ip", socket_path=daemon.socket_path, form="inprocess", names=["loopback"]
    )
    before = daemon.calls()
    assert_version_answer(run_version(short_dir / "ip" / "loopback"))
    assert daemon.calls() == before


def raw_exchange(socket_path: str, data: bytes, fds: list[int] | None = None) -> protocol.Reply:
    return client.exchange(socket_path, data, fds, timeout=30)


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        protocol.REQUEST_PREFIX.pack(b"pCNI", 9, 1, 0, 0, 0),
        protocol.REQUEST_PREFIX.pack(b"pCNI", 2, 1, protocol.FLAG_CALLER_NETNS, 5, 0)
        + b"loop\0",  # unknown type
        protocol.REQUEST_PREFIX.pack(b"pCNI", 2, 1, 0, 9, 0) + b"loopback\0",  # no caller netns
        protocol.REQUEST_PREFIX.pack(b"pCNI", 2, 1, 0, 9, 0) + b"loopback\0"[:-1] + b"!",
        protocol.REQUEST_PREFIX.pack(b"pCNI", 2, 1, protocol.FLAG_TARGET_NETNS, 9, 0)
        + b"loopback\0",  # announces an fd it does not send
    ],
)
def test_malformed_request_gets_a_cni_error(daemon: DaemonProc, data: bytes) -> None:
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        reply = raw_exchange(daemon.socket_path, data, [own] if data.endswith(b"loop\0") else [])
    finally:
        os.close(own)
    if data.endswith(b"loop\0"):  # well-formed, but names no plugin: error 50
        assert reply.exit_code == 1
        assert json.loads(reply.stdout)["code"] == 50
    elif data.endswith(b"loopback\0") and data[7] == 0:  # the caller's netns fd is required
        assert reply.exit_code == 1
        err = json.loads(reply.stdout)
        assert err["code"] == INVALID_NETNS and "caller's network namespace" in err["msg"]
    else:
        assert reply.exit_code == 1
        err = json.loads(reply.stdout)
        assert err["code"] == DECODING_FAILURE, err
    assert client.ping(daemon.socket_path)["status"] == "ok"  # still serving


def test_extra_fds_are_refused_and_closed(daemon: DaemonProc) -> None:
    data = protocol.encode_request(
        protocol.KIND_CALL, "loopback", {"CNI_COMMAND": "VERSION"}, flags=0
    )
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        reply = raw_exchange(daemon.socket_path, data, [fd])
    finally:
        os.close(fd)
    assert json.loads(reply.stdout)["code"] == DECODING_FAILURE
    baseline = _settled_fd_count(daemon.proc.pid)
    for _ in range(5):
        fd = os.open("/proc/self/ns/net", os.O_RDONLY)
        raw_exchange(daemon.socket_path, data, [fd])
        os.close(fd)
    assert _settled_fd_count(daemon.proc.pid) == baseline  # no fd leak


def _settled_fd_count(pid: int) -> int:
    """The daemon's open fds once it has closed the last connection (it replies first)."""
    last, stable = -1, 0
    for _ in range(100):
        count = len(os.listdir(f"/proc/{pid}/fd"))
        stable = stable + 1 if count == last else 0
        if stable == 5:
            break
        last = count
        time.sleep(0.02)
    return last


def test_client_killed_mid_request_does_not_hurt_the_daemon(daemon: DaemonProc) -> None:
    partial = protocol.REQUEST_PREFIX.pack(b"pCNI", 2, 1, 0, 200, 0) + b"loopback\0"
    code = (
        "import socket, sys, os, signal\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({daemon.socket_path!r})\n"
        f"s.sendall({partial!r})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert killed.returncode == -signal.SIGKILL
    # And one that sends a whole call and leaves before reading the reply.
    s = socket.socket(socket.AF_UNIX)
    s.connect(daemon.socket_path)
    s.sendall(protocol.encode_request(protocol.KIND_CALL, "loopback", {"CNI_COMMAND": "VERSION"}))
    s.close()
    # Both are forgotten: only our own stats request stays in flight (the previous stats
    # request may still be finishing right after its reply, hence the retries).
    deadline = time.monotonic() + 10
    while (in_flight := client.stats(daemon.socket_path)["inFlight"]) > 1:
        assert time.monotonic() < deadline, in_flight
        time.sleep(0.05)
    # Cut off mid-request (bad request), or refused at accept when already dead by then.
    deadline = time.monotonic() + 5
    while daemon.count("bad_requests") + daemon.count("refused") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert daemon.proc.poll() is None
    assert client.ping(daemon.socket_path)["status"] == "ok"


def _connect_as_nobody(socket_path: str) -> tuple[str, bytes]:
    """Fork; the child drops to uid 65534 and tries a PING. Returns (outcome, reply bytes)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only raw syscalls, then _exit
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            try:
                s.connect(socket_path)
            except PermissionError:
                os.write(w, b"EACCES")
                os._exit(0)
            # Refused at accept: the daemon may close before reading this ...
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.sendall(protocol.encode_request(protocol.KIND_PING))
            data = b""
            with contextlib.suppress(ConnectionResetError):  # ... our request unread
                while chunk := s.recv(65536):
                    data += chunk
            os.write(w, b"REPLY" + data)
            os._exit(0)
        except BaseException as exc:
            os.write(w, f"ERROR {exc!r}".encode())
            os._exit(3)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        out = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    if out.startswith(b"REPLY"):
        return "reply", out[5:]
    return out.decode(), b""


def test_socket_is_root_only(daemon: DaemonProc) -> None:
    sock_dir = os.path.dirname(daemon.socket_path)
    assert os.stat(sock_dir).st_mode & 0o777 == 0o700
    assert os.stat(daemon.socket_path).st_mode & 0o777 == 0o600
    assert _connect_as_nobody(daemon.socket_path) == ("EACCES", b"")
    # Even with the file modes opened up, the daemon checks the peer's uid itself.
    os.chmod(sock_dir, 0o755)
    os.chmod(daemon.socket_path, 0o666)
    outcome, data = _connect_as_nobody(daemon.socket_path)
    assert outcome == "reply"
    head = protocol.parse_reply_header(data[:20])
    code, out_len = head.exit_code, head.stdout_len
    err = json.loads(data[20 : 20 + out_len])
    assert code == 1
    assert err["code"] == IO_FAILURE
    assert "root only" in err["msg"]
    assert daemon.count("refused", 1) == 1


def test_sigterm_drains_in_flight_calls(short_dir: Path) -> None:
    d = start_daemon(short_dir)
    request = protocol.encode_request(
        protocol.KIND_CALL, "loopback", {"CNI_COMMAND": "VERSION"},
        flags=protocol.FLAG_CALLER_NETNS,
    )  # fmt: skip
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(d.socket_path)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    s.sendmsg([request[:20]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, own.to_bytes(4, "little"))])
    os.close(own)  # in flight: the daemon is waiting for the rest
    time.sleep(0.2)
    d.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while os.path.exists(d.socket_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(d.socket_path)  # no new calls accepted
    assert d.proc.poll() is None  # but still finishing ours
    s.sendall(request[20:])
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head = protocol.parse_reply_header(data[:20])
    code, out_len = head.exit_code, head.stdout_len
    assert code == 0
    assert "supportedVersions" in json.loads(data[20 : 20 + out_len])
    assert d.proc.wait(timeout=30) == 0


@pytest.mark.parametrize("form", FORMS)
def _ack(bound_ms: int) -> bytes:
    return protocol.encode_reply(protocol.ack_reply(bound_ms))


def _fake_daemon(sock_path: str, behaviour: str) -> threading.Thread:
    """A root server on ``sock_path`` that serves one connection as ``behaviour`` says:
    "silent" never answers the HELLO; "die" acknowledges it, reads the call and closes;
    "hang" acknowledges it with a bound of 0 ms and never replies."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen(4)
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        listener.close()
        with conn:
            conn.settimeout(30)
            received.append(conn.recv(16))  # the HELLO
            if behaviour == "silent":
                with contextlib.suppress(OSError):  # until the entry point gives up
                    received.append(conn.recv(65536))
                return
            conn.sendall(_ack(0))
            with contextlib.suppress(OSError):
                received.append(conn.recv(65536))  # the call
                if behaviour == "hang":
                    received.append(conn.recv(65536))  # until the entry point gives up

    thread = threading.Thread(target=serve, daemon=True)
    thread.received = received  # type: ignore[attr-defined]
    thread.start()
    return thread


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("behaviour", ["die", "hang"])
def test_daemon_failing_after_the_ack_is_try_again_later(
    form: str, behaviour: str, short_dir: Path
) -> None:
    """A daemon that acknowledged and got the call, then closes or never replies: the call
    may have run, so it is never re-run: CNI error 11 (after the announced bound + slack)."""
    sock_path = str(short_dir / "dying.sock")
    server = _fake_daemon(sock_path, behaviour)
    install.install(short_dir / form, socket_path=sock_path, form=form, names=["loopback"])
    proc = subprocess.run(
        [str(short_dir / form / "loopback")],
        env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=60,
    )  # fmt: skip
    server.join(30)
    assert proc.returncode == 1, proc
    err = json.loads(proc.stdout)
    assert err["code"] == TRY_AGAIN_LATER
    assert "try again later" in err["msg"]
    if behaviour == "hang":
        assert "not re-run" in err["details"], err
    hello, call = server.received[:2]  # type: ignore[attr-defined]
    assert hello == protocol.encode_request(protocol.KIND_HELLO)
    assert b"loopback\0" in call  # the call was sent after the ack


@pytest.mark.parametrize("form", FORMS)
def test_daemon_that_never_acknowledges_gets_no_call(form: str, short_dir: Path) -> None:
    """A stalled daemon (its backlog accepted the connection, nobody answers): after
    ACK_TIMEOUT_MS the entry point runs the plugin itself, having sent nothing but the HELLO."""
    sock_path = str(short_dir / "silent.sock")
    server = _fake_daemon(sock_path, "silent")
    install.install(short_dir / form, socket_path=sock_path, form=form, names=["loopback"])
    proc = subprocess.run(
        [str(short_dir / form / "loopback")],
        env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=60,
    )  # fmt: skip
    server.join(30)
    assert_version_answer(proc)  # ran in-process
    assert server.received == [protocol.encode_request(protocol.KIND_HELLO), b""]  # type: ignore[attr-defined]


def test_stats_and_ping_commands(daemon: DaemonProc, short_dir: Path) -> None:
    install.install(short_dir / "c", socket_path=daemon.socket_path, form="c", names=["loopback"])
    for _ in range(3):
        assert_version_answer(run_version(short_dir / "c" / "loopback"))
    assert daemon.count("calls", 3) >= 3
    cmd = [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", daemon.socket_path]
    stats = json.loads(subprocess.run([*cmd, "--stats"], capture_output=True, check=True).stdout)
    assert stats["counts"]["calls"] >= 3
    assert set(stats["phasesMs"]) == {"recv", "queue", "run", "send", "total"}
    assert stats["phasesMs"]["total"]["max"] > 0
    ping = json.loads(subprocess.run([*cmd, "--ping"], capture_output=True, check=True).stdout)
    assert ping["status"] == "ok"
    assert ping["protocolVersion"] == protocol.VERSION
    assert ping["plugins"]["loopback"] == "ok"


def test_second_daemon_on_the_same_socket_refuses(daemon: DaemonProc) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", daemon.socket_path],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "another pycni daemon" in proc.stderr
    assert client.ping(daemon.socket_path)["status"] == "ok"


@pytest.mark.parametrize("form", FORMS)
def test_entry_point_reads_stdin_before_connecting(
    form: str, daemon: DaemonProc, short_dir: Path
) -> None:
    """A runtime that writes stdin slowly holds its entry point, never the daemon."""
    install.install(short_dir / form, socket_path=daemon.socket_path, form=form, names=["loopback"])
    env = {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "slowstdin", "CNI_IFNAME": "lo",
           "CNI_NETNS": "", "CNI_PATH": str(short_dir / form), "PATH": "/usr/bin:/bin"}  # fmt: skip
    before = daemon.calls()
    proc = subprocess.Popen(
        [str(short_dir / form / "loopback")], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None
    for piece in (b'{"cniVersion": "1.0.0", ', b'"name": "slow", ', b'"type": "loopback"}'):
        proc.stdin.write(piece)
        proc.stdin.flush()
        time.sleep(1.0)
    assert client.stats(daemon.socket_path)["inFlight"] == 1  # only this stats request
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() must not flush it
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    assert daemon.count("calls", before + 1) == before + 1
    recent = client.stats(daemon.socket_path)["recent"][-1]
    assert recent["container_id"] == "slowstdin"
    assert recent["recv"] < 1500  # ms: the request came in one piece, not over 3 s


@pytest.mark.parametrize("form", FORMS)
def test_full_backlog_falls_back_to_in_process_after_a_second(form: str, short_dir: Path) -> None:
    """A daemon that does not accept (overloaded, or paused at its fd limit) is not waited
    for: connect() gives up after 1 s, nothing was sent, the plugin runs in-process."""
    sock_path = str(short_dir / "full.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen(0)
    fillers = []
    while True:
        filler = socket.socket(socket.AF_UNIX)
        filler.setblocking(False)
        if filler.connect_ex(sock_path) != 0:
            filler.close()
            break
        fillers.append(filler)
    install.install(short_dir / form, socket_path=sock_path, form=form, names=["loopback"])
    try:
        started = time.monotonic()
        assert_version_answer(run_version(short_dir / form / "loopback"))
        assert 0.9 < time.monotonic() - started < 20
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_sigterm_taken_by_a_worker_thread_still_stops_the_daemon(short_dir: Path) -> None:
    """The kernel may deliver a process's SIGTERM to any of its threads. Sent to a worker
    thread alone (tgkill), it must still wake the idle main loop and stop the daemon; without
    the wakeup fd the main thread slept in select() until something else woke it."""
    import ctypes

    d = start_daemon(short_dir)
    try:
        threads = sorted(int(t) for t in os.listdir(f"/proc/{d.proc.pid}/task"))
        others = [t for t in threads if t != d.proc.pid]
        assert others  # workers exist before the first call
        libc = ctypes.CDLL(None, use_errno=True)
        sys_tgkill = 234  # x86_64
        assert libc.syscall(sys_tgkill, d.proc.pid, others[-1], signal.SIGTERM) == 0
        assert d.proc.wait(timeout=15) == 0
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
