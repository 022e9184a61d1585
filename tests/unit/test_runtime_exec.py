"""Finding and running plugins: errors decoded as invoke does, timeouts, cancel, busy retry."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from pycni.runtime import (
    CallControl,
    CNIConfig,
    PluginCancelled,
    PluginTimeout,
    RawExec,
    RuntimeConf,
    conf_list_from_bytes,
    find_in_path,
)
from pycni.runtime.exec import decode_result, go_quote, plugin_env, plugin_error
from pycni.spec.errors import CNIError
from tests.unit.test_runtime_support import FakePlugins, conflist

RT = RuntimeConf("ctr1", "/var/run/netns/ctr1", "eth0")


def _run(path: Path, stdin: bytes = b"{}", **kwargs: object) -> bytes:
    exec_ = RawExec(copy_stderr=False)
    control = CallControl.start(**kwargs)  # type: ignore[arg-type]
    return exec_.exec_plugin(str(path), stdin, plugin_env("ADD"), control)


# --- find_in_path ------------------------------------------------------------------------------


def test_find_in_path_first_regular_file(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "bridge").mkdir()  # a directory is not a plugin
    (tmp_path / "two" / "bridge").write_text("x")  # exec bit is not checked
    (tmp_path / "one" / "link").symlink_to(tmp_path / "two" / "bridge")
    dirs = [str(tmp_path / "one"), str(tmp_path / "two")]
    assert find_in_path("bridge", dirs) == str(tmp_path / "two" / "bridge")
    assert find_in_path("link", dirs) == str(tmp_path / "one" / "link")


@pytest.mark.parametrize(
    ("plugin", "paths", "message"),
    [
        ("", ["/x"], "no plugin name provided"),
        ("../bridge", ["/x"], "invalid plugin name: ../bridge"),
        ("a\\b", ["/x"], "invalid plugin name: a\\b"),
        ("bridge", [], "no paths provided"),
        (
            "nope",
            ["/nonexistent-a", "/nonexistent-b"],
            'failed to find plugin "nope" in path [/nonexistent-a /nonexistent-b]',
        ),
    ],
)
def test_find_in_path_errors(plugin: str, paths: list[str], message: str) -> None:
    with pytest.raises(CNIError) as info:
        find_in_path(plugin, paths)
    assert str(info.value) == message


def test_plugin_type_with_slash_is_refused_by_the_chain(tmp_path: Path) -> None:
    cni = CNIConfig([str(tmp_path)], cache_dir=str(tmp_path / "c"))
    conf = conf_list_from_bytes(conflist("n", "1.0.0", {"type": "/bin/true"}))
    with pytest.raises(CNIError) as info:
        cni.add_network_list(conf, RT)
    assert str(info.value) == 'plugin type="/bin/true" failed (add): invalid plugin name: /bin/true'


# --- error decoding ----------------------------------------------------------------------------


def test_plugin_error_cases() -> None:
    assert str(plugin_error("exit status 1", b"", b"")) == (
        "netplugin failed with no error message: exit status 1"
    )
    assert str(plugin_error("exit status 2", b"", b"boom\n")) == (
        'netplugin failed: "boom\\n": exit status 2'
    )
    err = plugin_error("exit status 1", b'{"code": 7, "msg": "bad", "details": "d"}', b"noise")
    assert (err.code, err.msg, err.details) == (7, "bad", "d")
    garbage = plugin_error("exit status 1", b"not json", b"")
    assert garbage.code == 0
    assert garbage.msg.startswith(
        'netplugin failed but error parsing its diagnostic message "not json": '
    )


def test_go_quote() -> None:
    assert go_quote(b'a"b\\c\n\t\x01\xff') == '"a\\"b\\\\c\\n\\t\\x01\\xff"'
    assert go_quote("é".encode()) == '"é"'


def test_exec_garbage_stdout_nonzero(tmp_path: Path) -> None:
    plugins = FakePlugins(tmp_path)
    path = plugins.script("p", "echo garbage; exit 3\n")
    with pytest.raises(CNIError) as info:
        _run(path)
    assert 'error parsing its diagnostic message "garbage\\n"' in str(info.value)
    assert str(info.value).count("exit status 3") == 0  # the parse error is reported instead


def test_exec_nonzero_with_nothing(tmp_path: Path) -> None:
    path = FakePlugins(tmp_path).script("p", "exit 4\n")
    with pytest.raises(CNIError) as info:
        _run(path)
    assert str(info.value) == "netplugin failed with no error message: exit status 4"


def test_exec_killed_by_signal(tmp_path: Path) -> None:
    path = FakePlugins(tmp_path).script("p", "kill -TERM $$\n")
    with pytest.raises(CNIError) as info:
        _run(path)
    assert str(info.value) == "netplugin failed with no error message: signal: terminated"


def test_exec_not_executable(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_text("#!/bin/sh\n")
    with pytest.raises(CNIError) as info:
        _run(path)
    assert str(info.value) == (
        f"netplugin failed with no error message: fork/exec {path}: permission denied"
    )


def test_exec_success_garbage_result(tmp_path: Path) -> None:
    plugins = FakePlugins(tmp_path)
    plugins.add("p", ADD={"stdout": "garbage"})
    cni = CNIConfig([str(tmp_path)], cache_dir=str(tmp_path / "c"), exec=RawExec(copy_stderr=False))
    with pytest.raises(CNIError) as info:
        cni.add_network_list(conf_list_from_bytes(conflist("n", "1.0.0", {"type": "p"})), RT)
    assert str(info.value).startswith(
        'plugin type="p" failed (add): failed to unmarshal raw result: '
    )


def test_decode_result_null_and_versions() -> None:
    conf = json.dumps({"cniVersion": "0.4.0"}).encode()
    assert decode_result(conf, b"null").cni_version == "0.4.0"
    assert decode_result(b"{}", b"{}").cni_version == "0.1.0"
    with pytest.raises(CNIError) as info:
        decode_result(conf, b'{"cniVersion": "9.9.9"}')
    assert 'unsupported CNI result version "9.9.9"' in str(info.value)


def test_stdin_env_and_stderr_copy(tmp_path: Path) -> None:
    path = FakePlugins(tmp_path).script(
        "p",
        'cat; printf "$CNI_COMMAND|$CNI_CONTAINERID|$CNI_NETNS|$CNI_ARGS|'
        '$CNI_IFNAME|$CNI_PATH"; echo log >&2\n',
    )
    sink = io.BytesIO()
    env = plugin_env("DEL", container_id="c", args=[("A", "1"), ("B", "2")], path="/p1:/p2")
    out = RawExec(stderr=sink).exec_plugin(str(path), b"IN", env, CallControl())
    assert out == b"INDEL|c||A=1;B=2||/p1:/p2"
    assert sink.getvalue() == b"log\n"
    text_sink = io.StringIO()
    RawExec(stderr=text_sink).exec_plugin(str(path), b"", env, CallControl())
    assert text_sink.getvalue() == "log\n"


# --- timeouts, cancellation, busy files --------------------------------------------------------


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_timeout_kills_plugin_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    path = FakePlugins(tmp_path).script("p", f"sleep 30 & echo $! > {pidfile}\nsleep 30\n")
    start = time.monotonic()
    with pytest.raises(PluginTimeout) as info:
        _run(path, timeout=0.5)
    assert time.monotonic() - start < 5
    assert "timed out after 0.5s" in str(info.value)
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_chain_timeout_names_plugin(tmp_path: Path) -> None:
    plugins = FakePlugins(tmp_path)
    plugins.add("slow", ADD={"sleep": 30})
    cni = CNIConfig([str(tmp_path)], cache_dir=str(tmp_path / "c"), timeout=0.5)
    with pytest.raises(CNIError) as info:
        cni.add_network_list(conf_list_from_bytes(conflist("n", "1.0.0", {"type": "slow"})), RT)
    assert str(info.value).startswith('plugin type="slow" failed (add): netplugin ')
    assert "timed out" in str(info.value)


def test_cancel_kills_plugin(tmp_path: Path) -> None:
    path = FakePlugins(tmp_path).script("p", "sleep 30\n")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(PluginCancelled):
        _run(path, timeout=None, cancel=cancel)
    assert time.monotonic() - start < 5


def test_text_file_busy_is_retried(tmp_path: Path) -> None:
    path = tmp_path / "p"
    handle = open(path, "w")  # noqa: SIM115 - held open on purpose to make the file busy
    handle.write("#!/bin/sh\necho done\n")
    handle.flush()
    os.chmod(path, 0o755)
    threading.Timer(0.3, handle.close).start()
    exec_ = RawExec(copy_stderr=False, busy_delay=0.1)
    assert exec_.exec_plugin(str(path), b"", plugin_env("ADD"), CallControl()) == b"done\n"


def test_text_file_busy_gives_up(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n")
        handle.flush()
        os.chmod(path, 0o755)
        exec_ = RawExec(copy_stderr=False, busy_delay=0.01, busy_retries=2)
        with pytest.raises(CNIError) as info:
            exec_.exec_plugin(str(path), b"", plugin_env("ADD"), CallControl())
    assert "text file busy" in str(info.value)


# --- the two ways a plugin is started: posix_spawn (one-shot callers) and Popen ---------------


@pytest.fixture(params=["posix_spawn", "popen"])
def start_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test below runs through both starts: a plain call in a single-threaded process
    takes posix_spawn; the daemon (threads) takes Popen."""
    from pycni.runtime import exec as exec_module

    monkeypatch.setattr(exec_module, "_single_threaded", lambda: request.param == "posix_spawn")
    return str(request.param)


def test_large_stdin_and_output_do_not_deadlock(tmp_path: Path, start_path: str) -> None:
    """Both pipes fill (4 MiB each way, a pipe holds 64 KiB): the pump must write and read
    at once."""
    path = FakePlugins(tmp_path).script("p", "cat; head -c 4194304 /dev/zero >&2\n")
    sink = io.BytesIO()
    data = os.urandom(4 << 20)
    out = RawExec(stderr=sink).exec_plugin(str(path), data, plugin_env("ADD"), CallControl())
    assert out == data
    assert sink.getvalue() == b"\0" * (4 << 20)


def test_plugin_that_ignores_stdin(tmp_path: Path, start_path: str) -> None:
    """It exits without reading a config larger than the pipe: EPIPE is not an error."""
    path = FakePlugins(tmp_path).script("p", "printf done\n")
    assert _run(path, stdin=b"x" * (1 << 20)) == b"done"


def test_new_session_default_sigpipe_and_no_inherited_fds(tmp_path: Path, start_path: str) -> None:
    """As Popen(start_new_session=True, close_fds=True, restore_signals=True)."""
    script = (
        "ps -o sid= -p $$ | tr -d ' '; echo; ls /proc/$$/fd | sort -n | tr '\\n' ' '; echo; "
        "grep SigIgn /proc/$$/status\n"
    )
    path = FakePlugins(tmp_path).script("p", script)
    keep = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(keep, True)
    try:
        lines = _run(path, stdin=b"").decode().splitlines()
    finally:
        os.close(keep)
    sid, fds, ignored = lines[0], lines[1].split(), lines[2]
    assert sid != str(os.getsid(0))
    assert str(keep) not in fds and set(fds) <= {"0", "1", "2", "255"}
    assert int(ignored.split()[1], 16) & (1 << (13 - 1)) == 0  # SIGPIPE not ignored


def test_spawn_failures_are_go_texts(tmp_path: Path, start_path: str) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(CNIError) as info:
        _run(missing)
    assert str(info.value).startswith(
        f"netplugin failed with no error message: fork/exec {missing}"
    )
    assert "no such file or directory" in str(info.value)


@pytest.mark.parametrize(
    ("ip", "message"),
    [
        ({"address": "10.1.0.300/24"}, "invalid CIDR address: 10.1.0.300/24"),
        ({"address": "10.1.0.2/24", "gateway": "10.1.0"}, "invalid IP address: 10.1.0"),
    ],
)
def test_a_bad_address_in_a_result_is_worded_as_libcni(ip: dict[str, str], message: str) -> None:
    """libcni reports Go's net.ParseError text (cnitool prints it after `plugin … failed`)."""
    stdout = json.dumps({"cniVersion": "1.0.0", "ips": [ip]}).encode()
    with pytest.raises(CNIError) as info:
        decode_result(b'{"cniVersion":"1.0.0"}', stdout)
    assert str(info.value) == message
