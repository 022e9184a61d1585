"""Delegation to a foreign (exec'd) plugin goes through the runtime's exec path: the call's
deadline kills the delegate and its whole process group; a DEL is never cancelled."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import pytest

from pycni.runtime.exec import CallControl, PluginCancelled, PluginTimeout
from pycni.skel.base import Request
from pycni.skel.delegate import call_control, delegate


def make_request(bin_dir: Path) -> Request:
    return Request(
        command="ADD", container_id="c1", netns="/x", ifname="eth0", args="",
        path=[str(bin_dir)], config={"cniVersion": "1.0.0", "name": "n"},
        stdin=b'{"cniVersion": "1.0.0", "name": "n"}', env={"PATH": "/usr/bin:/bin"},
        stderr=io.StringIO(),
    )  # fmt: skip


def write_plugin(bin_dir: Path, body: str) -> None:
    path = bin_dir / "fake-ipam"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_delegate_is_killed_with_its_children_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    write_plugin(tmp_path, f"sleep 60 & echo $! > {pid_file}; wait")
    started = time.monotonic()
    with call_control(CallControl.start(0.5)), pytest.raises(PluginTimeout):
        delegate(make_request(tmp_path), "fake-ipam")
    assert time.monotonic() - started < 5
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.02)  # the process group was killed: the grandchild too
    assert not os.path.exists(f"/proc/{child}")


def test_cancellation_kills_the_delegate(tmp_path: Path) -> None:
    write_plugin(tmp_path, "exec sleep 60")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with call_control(CallControl.start(None, cancel)), pytest.raises(PluginCancelled):
        delegate(make_request(tmp_path), "fake-ipam")


def test_del_runs_even_when_the_call_is_cancelled(tmp_path: Path) -> None:
    write_plugin(tmp_path, 'echo "$CNI_COMMAND" > ' + str(tmp_path / "ran"))
    cancel = threading.Event()
    cancel.set()
    with call_control(CallControl.start(None, cancel)):
        assert delegate(make_request(tmp_path), "fake-ipam", "DEL") is None
    assert (tmp_path / "ran").read_text() == "DEL\n"


def test_result_and_stderr_of_a_delegate(tmp_path: Path) -> None:
    write_plugin(tmp_path, 'echo "note" >&2; echo \'{"cniVersion": "1.0.0", "ips": []}\'')
    req = make_request(tmp_path)
    result = delegate(req, "fake-ipam")
    assert result is not None and result.ips == []
    assert req.stderr.getvalue() == "note\n"
