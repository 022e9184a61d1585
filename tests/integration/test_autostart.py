"""Autostart: with no daemon, the installed entry points start one (exactly one), keep every
call working meanwhile, route later calls through it, and it leaves when idle or killed.

Every daemon here serves a private socket in a tmp dir and is found by that path in its
command line; each test kills what it started, and checks that nothing is left running.
"""

from __future__ import annotations

import contextlib
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

from pycni.fast import autostart, client, install
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
