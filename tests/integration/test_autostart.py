"""Autostart: with no daemon, the installed entry points start one (exactly one), keep every
call working meanwhile, route later calls through it, and it leaves when idle or killed.

Every daemon here serves a private socket in a tmp dir and is found by that path in its
command line; each test kills what it started, and checks that nothing is left running.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pycni.daemon import autostart, client
from pycni.entrypoints import install
from pycni.inspect.daemon import read_daemon
from tests import harness

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

PODS = 20
BRIDGE = "cniauto0"


def daemons(sock: str) -> list[int]:
    """Live processes with ``sock`` in their command line (the autostarted daemons)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if sock.encode() in cmdline.split(b"\0") and state != "Z":
            found.append(int(pid))
    return found


def kill_all(sock: str) -> None:
    deadline = time.monotonic() + 30
    while pids := daemons(sock):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert time.monotonic() < deadline, f"daemons of {sock} do not die: {pids}"
        time.sleep(0.05)


def wait_for(what: str, check: Callable[[], bool], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            text = log.read_text() if log.exists() else "(no log)"
            raise AssertionError(f"timed out waiting for {what}; daemon log:\n{text}")
        time.sleep(0.05)


def answering(sock: str) -> dict[str, object] | None:
    try:
        return client.ping(sock, timeout=5)
    except (client.DaemonUnavailable, OSError, ValueError):
        return None


def refused(sock: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(sock)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pycni-as"))  # 0700, root's: a valid socket dir
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Node:
    """The entry points installed with autostart, and a bridge network to ADD/DEL pods on."""

    def __init__(
        self, node: harness.Namespace, state: harness.State, work: Path, form: str, idle: float
    ) -> None:
        self.node = node
        self.state = state
        self.sock = str(work / "run" / "d.sock")
        self.log = Path(autostart.log_path(self.sock))
        self.bindir = work / "bin"
        self.report = install.install(
            self.bindir,
            socket_path=self.sock,
            form=form,
            names=["bridge", "host-local"],
            autostart=True,
            idle_exit=idle,
        )
        assert self.report.form == form and self.report.autostart
        self.config = {
            "cniVersion": "1.0.0",
            "name": "autonet",
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipam": {
                "type": "host-local",
                "subnet": "10.78.0.0/24",
                "dataDir": str(state.data_dir),
            },
        }

    def call(self, command: str, pod: harness.Namespace, index: int) -> harness.PluginRun:
        with self.node.entered():  # the runtime runs plugins in the node's namespace
            return harness.exec_plugin(
                self.bindir / "bridge", command, self.config, container_id=f"autopod{index}",
                netns=pod.path, cni_path=str(self.bindir), timeout=120,
            )  # fmt: skip

    def calls_served(self) -> int:
        return int(client.stats(self.sock)["counts"]["calls"])


@pytest.mark.parametrize("form", ["c", "python"])
def test_pods_work_from_the_first_call_and_one_daemon_serves_the_rest(
    form: str,
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    tmp_state: harness.State,
    work: Path,
) -> None:
    pods = [pod_factory() for _ in range(PODS)]
    net = Node(node, tmp_state, work, form, idle=120)
    assert daemons(net.sock) == [] and not os.path.exists(net.sock)
    try:
        # The first two calls arrive at once: both run in-process, exactly one daemon starts.
        barrier = threading.Barrier(2)

        def first(index: int) -> harness.PluginRun:
            barrier.wait()
            return net.call("ADD", pods[index], index)

        with ThreadPoolExecutor(max_workers=2) as pool:
            for result in pool.map(first, range(2)):
                result.ok()
        wait_for("the autostarted daemon", lambda: answering(net.sock) is not None, net.log)
        health = answering(net.sock)
        assert health is not None and health["startedBy"] == "autostart"
        assert health["idleExitSeconds"] == 120
        started = daemons(net.sock)
        assert started == [health["pid"]], started
        seen = read_daemon(net.sock, plugin_dirs=[str(net.bindir)])  # what `pycni inspect` shows
        assert (seen.how, seen.started_by) == (
            "autostart",
            "by autostart (an entry point found no daemon)",
        )
        assert seen.entry_points[0].modes == [
            f"{form} form, forwards to this socket, autostarts a daemon (idle exit 120s)"
        ]
        assert node.links()  # sanity: we can read the node
        before = net.calls_served()

        with ThreadPoolExecutor(max_workers=4) as pool:
            adds = list(pool.map(lambda i: net.call("ADD", pods[i], i), range(2, PODS)))
        for result in adds:
            result.ok()
        # The later calls went through the daemon: bridge (and its host-local) per ADD.
        wait_for(
            "the calls to be counted",
            lambda: net.calls_served() >= before + PODS - 2,
            net.log,
            timeout=10,
        )
        with ThreadPoolExecutor(max_workers=4) as pool:
            dels = list(pool.map(lambda i: net.call("DEL", pods[i], i), range(PODS)))
        for result in dels:
            result.ok()
        assert daemons(net.sock) == started  # still the one daemon
        # A call is logged just after its reply is written: the last ones may come a bit later.
        dels_logged = lambda: net.log.read_text().count(" bridge DEL exit=0 ") == PODS  # noqa: E731
        wait_for("every DEL in the daemon's log", dels_logged, net.log, timeout=10)
        assert net.log.read_text().count("pycni daemon serving on") == 1
    finally:
        kill_all(net.sock)
    assert tmp_state.reservations("autonet") == []
    assert [n for n in node.links() if n.startswith("veth")] == []
    assert all("eth0" not in pod.links() for pod in pods)


def test_a_killed_daemon_is_replaced_and_an_idle_one_exits(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    tmp_state: harness.State,
    work: Path,
) -> None:
    pods = [pod_factory() for _ in range(3)]
    net = Node(node, tmp_state, work, "c", idle=5)
    try:
        net.call("ADD", pods[0], 0).ok()
        wait_for("the autostarted daemon", lambda: answering(net.sock) is not None, net.log)
        first = daemons(net.sock)
        assert len(first) == 1
        os.kill(first[0], signal.SIGKILL)  # mid-run: the socket file stays behind, stale
        # Dead once its socket refuses (its threads may outlive the process's visible end).
        wait_for("the daemon to die", lambda: refused(net.sock), net.log)
        assert daemons(net.sock) == [] and os.path.exists(net.sock)

        net.call("ADD", pods[1], 1).ok()  # runs in-process and starts a new daemon
        wait_for("a new daemon", lambda: answering(net.sock) is not None, net.log)
        second = daemons(net.sock)
        assert len(second) == 1 and second != first
        net.call("DEL", pods[0], 0).ok()
        net.call("DEL", pods[1], 1).ok()
        assert net.calls_served() >= 2

        # No call for 5 s: it exits by itself, and takes its socket with it.
        wait_for("the idle exit", lambda: daemons(net.sock) == [], net.log, timeout=60)
        assert not os.path.exists(net.sock)
        log = net.log.read_text()
        assert "no call for 5s: exiting (--idle-exit)" in log, log
        assert log.count("pycni daemon serving on") == 2, log

        # After it left, calls still work, and the next daemon comes on demand.
        net.call("ADD", pods[2], 2).ok()
        wait_for("a third daemon", lambda: answering(net.sock) is not None, net.log)
        net.call("DEL", pods[2], 2).ok()
    finally:
        kill_all(net.sock)
    assert tmp_state.reservations("autonet") == []
    assert [n for n in node.links() if n.startswith("veth")] == []


def test_no_autostart_starts_nothing(work: Path) -> None:
    sock = str(work / "run" / "d.sock")
    report = install.install(work / "bin", socket_path=sock, form="c", names=["loopback"])
    assert not report.autostart
    assert install.entry_config(work / "bin" / "loopback") == {
        "form": "c",
        "autostart": "no",
        "socket": sock,
    }
    env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

    try:
        proc = subprocess.run([str(work / "bin" / "loopback")], env=env, capture_output=True)
        assert proc.returncode == 0, proc
        time.sleep(1)
        assert daemons(sock) == [] and not os.path.exists(sock)
    finally:
        kill_all(sock)


@pytest.mark.parametrize("form", ["c", "python"])
def test_no_autostart_in_a_directory_others_can_write(form: str, work: Path) -> None:
    shared = work / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: someone else could plant the lock or the log there
    sock = str(shared / "d.sock")
    install.install(work / "bin", socket_path=sock, form=form, names=["loopback"], autostart=True)
    env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        proc = subprocess.run([str(work / "bin" / "loopback")], env=env, capture_output=True)
        assert proc.returncode == 0, proc  # the call itself runs in-process as always
        time.sleep(1)
        assert daemons(sock) == []
        assert sorted(os.listdir(shared)) == []  # no lock, no log, no socket
    finally:
        kill_all(sock)


def test_idle_exit_never_resets_a_connection(work: Path) -> None:
    """Callers racing the idle exit are either served or find no daemon, never cut off."""
    sock = str(work / "run" / "d.sock")
    log = work / "daemon.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", sock, "--workers", "2",
             "--idle-exit", "1"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for("the daemon", lambda: answering(sock) is not None, log)
        outcomes: dict[str, int] = {"served": 0, "absent": 0}
        failures: list[str] = []

        def hammer() -> None:  # pings are not calls: they do not keep it alive
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    client.ping(sock, timeout=10)
                    outcomes["served"] += 1
                except client.DaemonUnavailable:
                    outcomes["absent"] += 1
                except (OSError, ValueError) as exc:
                    failures.append(repr(exc))

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert failures == [], failures
        assert outcomes["served"] > 0 and not os.path.exists(sock)
        assert "no call for 1s: exiting (--idle-exit)" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


ROUNDS = 200
BAD_CALLS: list[tuple[str, dict[str, str], bytes, int]] = [
    # (what, env without PATH, stdin, the CNI code the answer must carry)
    ("bad JSON", {"CNI_NETNS": "/proc/self/ns/net"}, b'{bad json, "name": "n"}', 6),
    ("missing env", {}, b'{"cniVersion": "1.0.0", "name": "n", "type": "bridge"}', 4),
    ("no name", {"CNI_NETNS": "/proc/self/ns/net"}, b'{"cniVersion": "1.0.0"}', 7),
]


def entry_point_processes(bindir: Path) -> list[int]:
    """Live processes running an entry point of ``bindir`` (calls, or the forks they made)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(bindir).encode() in cmdline and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def test_every_call_answers_json_in_fresh_autostart_rounds(work: Path) -> None:
    """Each round finds no daemon (no socket, or the stale one a killed daemon leaves), so the
    entry point starts one and runs the call in-process: a bad JSON, a missing env and a
    no-name call must each answer a CNI error on stdout, never an empty stdout. (Bad JSON used
    to die there: the C scanner builds its error from json.decoder, which nothing imported.)

    The test holds the autostart lock, as a daemon that is starting does: the daemons the
    rounds try to start give up, and 200 rounds cost no 200 daemon start-ups.
    """
    sock = str(work / "run" / "d.sock")
    bins = {form: work / f"bin-{form}" for form in ("c", "python")}
    for form, bindir in bins.items():
        install.install(bindir, socket_path=sock, form=form, names=["bridge"], autostart=True)
    os.mkdir(work / "run", 0o700)
    lock = os.open(autostart.lock_path(sock), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)

    def call(round_: int, index: int) -> str | None:
        what, env, stdin, code = BAD_CALLS[index]
        bindir = bins["c" if round_ % 2 == 0 else "python"]
        env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"r{round_}", "CNI_IFNAME": "eth0",
               "CNI_PATH": str(bindir), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}  # fmt: skip
        proc = subprocess.run(
            [str(bindir / "bridge")], input=stdin, env=env, capture_output=True, timeout=60
        )
        try:
            answer = json.loads(proc.stdout)
        except ValueError:
            answer = None
        if proc.returncode == 1 and isinstance(answer, dict) and answer.get("code") == code:
            return None
        return f"round {round_} {what}: exit {proc.returncode}, {proc.stdout!r} {proc.stderr!r}"

    try:
        failures: list[str] = []
        waiting_seen = 0
        with ThreadPoolExecutor(max_workers=4) as pool:
            for round_ in range(ROUNDS):
                if round_ % 4 == 1:  # a killed daemon's socket: connect() is refused
                    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    stale.bind(sock)
                    stale.close()
                elif os.path.exists(sock):
                    os.unlink(sock)
                calls = [pool.submit(call, round_, i) for i in range(len(BAD_CALLS))]
                failures += [f for f in (c.result() for c in calls) if f is not None]
                # A fork waiting for the lock must not hold the caller's stdout (a runtime
                # reads it to its end): the calls returned, yet it may still be waiting.
                waiting_seen += bool(
                    entry_point_processes(bins["c" if round_ % 2 == 0 else "python"])
                )
        assert failures == [], f"{len(failures)} calls answered no CNI error:\n" + "\n".join(
            failures[:5]
        )
        assert daemons(sock) == []  # none started: the lock was held throughout
        assert waiting_seen > 0, "every call waited for its autostart fork to give up"
    finally:
        os.close(lock)
        # the forks that tried to start a daemon give up within 2 s of the lock
        deadline = time.monotonic() + 30
        while any(entry_point_processes(b) for b in bins.values()):
            assert time.monotonic() < deadline, "autostart forks still running"
            time.sleep(0.05)
        kill_all(sock)
