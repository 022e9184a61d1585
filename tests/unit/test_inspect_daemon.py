"""`pycni inspect`'s daemon line: a socket nobody serves is mode in-process (not an error),
and the text report says which; how a process was started is read from /proc."""

from __future__ import annotations

import os
from pathlib import Path

from pycni.inspect import daemon, render_text
from pycni.inspect.model import DaemonStatus, NodeState


def test_a_socket_nobody_serves_means_in_process(tmp_path: Path) -> None:
    status = daemon.read_daemon(str(tmp_path / "none.sock"), timeout=1.0)
    assert (status.answers, status.mode, status.pid) == (False, "in-process", None)
    assert str(tmp_path / "none.sock") in status.error
    state = NodeState("n", "c", "k", "d", daemon=status)
    assert f"Daemon: not running on {tmp_path / 'none.sock'}" in render_text.render(state, [])


def test_the_text_report_names_a_warm_daemon_and_how_it_started() -> None:
    status = DaemonStatus("/run/x.sock", True, "warm", "ok", 42, 16, 1.0, "systemd unit p.service")
    text = render_text.render(NodeState("n", "c", "k", "d", daemon=status), [])
    assert "Daemon: answering on /run/x.sock (pid 42, 16 workers, " in text
    assert text.count("calls from here run through the daemon") == 1
    assert "started systemd unit p.service)" in text
    assert "Daemon:" not in render_text.render(NodeState("n", "c", "k", "d"), [])


def test_started_by_names_a_unit_or_the_parent() -> None:
    found = daemon.started_by(os.getpid())
    assert found.startswith("systemd unit ") or f"(pid {os.getppid()})" in found
    assert daemon.started_by(2**22 + 12345) == ""  # no such process


def test_the_socket_is_read_from_the_entry_points(tmp_path: Path) -> None:
    from pycni.entrypoints import install

    install.install(tmp_path / "a", form="python", socket_path="/run/x/a.sock", names=["ptp"])
    install.install(
        tmp_path / "b", form="python", socket_path="/run/x/b.sock", names=["ptp", "bridge"]
    )
    install.install(tmp_path / "c", form="inprocess", names=["ptp"])
    dirs = [str(tmp_path / d) for d in ("a", "b", "c", "gone")]
    assert daemon.forwarded_sockets(dirs) == [("/run/x/b.sock", 2), ("/run/x/a.sock", 1)]
    assert daemon.choose_socket(None, dirs, "/d") == (
        "/run/x/b.sock",
        "2 entry points forward to it",
    )
    assert daemon.choose_socket("/run/x/a.sock", dirs, "/d") == (
        "/run/x/a.sock",
        "given; 1 entry points forward to it",
    )
    assert daemon.choose_socket(None, [str(tmp_path / "c")], "/d") == ("/d", "default")
    found = daemon.entry_point_dirs(dirs, "/run/x/b.sock")
    assert found[3].modes == ["does not exist"]  # never "not readable" for a missing dir


def test_another_mount_namespace_is_said_plainly() -> None:
    status = DaemonStatus("/run/x.sock", True, "warm", "other mount namespace")
    status.here = "in-process: this process runs in another mount namespace than the daemon"
    status.chosen_because = "3 entry points forward to it"
    text = render_text.render(NodeState("n", "c", "k", "d", daemon=status), [])
    line = next(ln for ln in text.splitlines() if ln.startswith("Daemon:"))
    assert line == (
        "Daemon: answering on /run/x.sock; 3 entry points forward to it; calls from here run "
        "in-process: this process runs in another mount namespace than the daemon"
    )


def test_terminal_escapes_in_names_are_not_printed() -> None:
    from pycni.inspect.model import Masquerade

    state = NodeState("n", "c", "k", "d", masquerades=[Masquerade("x\x1b]0;pwn\x07", "", ["1"])])
    text = render_text.render(state, [])
    assert "\x1b" not in text and "\x07" not in text and "x?]0;pwn?" in text
