"""Who the daemon serves, and whom the entry points trust, with both entry-point forms.

- a uid-0 caller without CAP_NET_ADMIN and CAP_SYS_ADMIN (dropped by capsh) is refused;
- a caller in another mount namespace (unshare -m) is told to run the plugin itself, and
  does so with its own CNI_PATH and dataDir;
- an entry point refuses a server that is not root and sends it nothing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pycni.entrypoints import install
from pycni.spec.errors import IO_FAILURE
from tests.integration.daemon_proc import DaemonProc

pytestmark = pytest.mark.kernel

FORMS = ("c", "python")
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.mark.parametrize("form", FORMS)
def test_root_without_capabilities_is_refused(
    form: str, daemon: DaemonProc, short_dir: Path
) -> None:
    install.install(short_dir / form, socket_path=daemon.socket_path, form=form, names=["loopback"])
    calls = daemon.calls()
    proc = subprocess.run(
        ["capsh", "--drop=cap_net_admin,cap_sys_admin", "--", "-c", 'exec "$0"',
         str(short_dir / form / "loopback")],
        env={"CNI_COMMAND": "VERSION", "PATH": PATH}, capture_output=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc
    err = json.loads(proc.stdout)
    assert err["code"] == IO_FAILURE and "root only" in err["msg"], err
    assert "CAP_NET_ADMIN and CAP_SYS_ADMIN" in err["details"], err
    assert daemon.count("refused", 1) >= 1
    assert daemon.calls() == calls  # nothing ran


SCRIPT = """
set -e
mount -t tmpfs pycni-test "$D"
mkdir "$D/bin" "$D/data"
cp "$SRC" "$D/bin/host-local"
"$D/bin/host-local" < "$CONF"
echo
echo FILES: $(ls "$D/data/mntnet")
"""


@pytest.mark.parametrize("form", FORMS)
def test_caller_in_another_mount_namespace_runs_the_plugin_itself(
    form: str, daemon: DaemonProc, short_dir: Path, pod_factory: object
) -> None:
    pod = pod_factory()  # type: ignore[operator]
    install.install(
        short_dir / form, socket_path=daemon.socket_path, form=form, names=["host-local"]
    )
    private = short_dir / "private"  # a tmpfs only the caller's mount namespace sees
    private.mkdir()
    conf = short_dir / "conf.json"
    conf.write_text(
        json.dumps({
            "cniVersion": "1.0.0", "name": "mntnet",
            "ipam": {"type": "host-local", "subnet": "10.68.0.0/24",
                     "dataDir": str(private / "data")},
        })
    )  # fmt: skip
    env = {
        "PATH": PATH, "D": str(private), "SRC": str(short_dir / form / "host-local"),
        "CONF": str(conf), "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "mntns1",
        "CNI_NETNS": pod.path, "CNI_IFNAME": "eth0", "CNI_PATH": str(private / "bin"),
    }  # fmt: skip
    calls = daemon.calls()
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", SCRIPT],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc
    result_text, files = proc.stdout.rsplit("FILES:", 1)
    result = json.loads(result_text)
    assert result["ips"][0]["address"] == "10.68.0.2/24"
    assert "10.68.0.2" in files.split()  # written to the caller's own dataDir ...
    assert list(private.iterdir()) == []  # ... which the daemon's mount namespace never sees
    assert daemon.count("run_locally", 1) >= 1
    assert daemon.calls() == calls  # nothing ran in the daemon


def _serve_as_nobody(sock_path: str) -> tuple[int, int]:
    """Fork a server that listens as uid 65534; returns (pid, read end of its report pipe)."""
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(ready_r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(sock_path)
            srv.listen(4)
            os.write(ready_w, b"x")
            srv.settimeout(20)
            conn, _ = srv.accept()
            conn.settimeout(5)
            received = 0
            try:
                while chunk := conn.recv(65536):
                    received += len(chunk)
            except OSError:
                pass
            os.write(w, str(received).encode())
            os._exit(0)
        except BaseException as exc:
            os.write(w, f"ERROR {exc!r}".encode())
            os._exit(3)
    os.close(w)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"x"
    os.close(ready_r)
    return pid, r


@pytest.mark.parametrize("form", FORMS)
def test_entry_point_refuses_a_server_that_is_not_root(form: str, short_dir: Path) -> None:
    run_dir = short_dir / "run"
    run_dir.mkdir(mode=0o777)
    run_dir.chmod(0o777)
    sock_path = str(run_dir / "fake.sock")
    install.install(short_dir / form, socket_path=sock_path, form=form, names=["host-local"])
    pid, report = _serve_as_nobody(sock_path)
    try:
        proc = subprocess.run(
            [str(short_dir / form / "host-local")], input=b'{"cniVersion": "1.0.0", "name": "x"}',
            env={"CNI_COMMAND": "ADD", "PATH": PATH}, capture_output=True, timeout=60,
        )  # fmt: skip
    finally:
        with os.fdopen(report, "rb") as pipe:
            received = pipe.read()
        os.waitpid(pid, 0)
    assert proc.returncode == 1, proc
    err = json.loads(proc.stdout)
    assert err["code"] == IO_FAILURE and "not root" in err["msg"], err
    assert received == b"0", received  # not a byte of the call (env, config) was sent


def test_socket_directory_must_be_root_only(short_dir: Path) -> None:
    """A directory others can write to (where the socket could be swapped) is refused."""
    shared = short_dir / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    proc = subprocess.run(
        [sys.executable, "-m", "pycni.cli.daemon_cmd",
         "--socket", str(shared / "d.sock")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "writable by group or others" in proc.stderr
    link = short_dir / "link"
    link.symlink_to(short_dir / "elsewhere")
    (short_dir / "elsewhere").mkdir(mode=0o700)
    proc = subprocess.run(
        [sys.executable, "-m", "pycni.cli.daemon_cmd",
         "--socket", str(link / "d.sock")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and "symlink" in proc.stderr
    assert not (short_dir / "elsewhere" / "d.sock").exists()


def test_ping_and_doctor_from_another_mount_namespace_say_calls_run_in_process(
    daemon: DaemonProc,
) -> None:
    """`ip netns exec` gives every command a mount namespace of its own: the daemon answers,
    but runs none of its calls, and the tools say so instead of calling the daemon dead."""
    sys_path = os.pathsep.join(p for p in sys.path if p)
    probe = (
        "from pycni.daemon import client\n"
        "try:\n"
        f"    client.ping({daemon.socket_path!r})\n"
        "except client.RunLocally as exc:\n"
        "    print('RUN-LOCALLY', exc)\n"
        "from pycni.inspect.daemon import read_daemon\n"
        f"s = read_daemon({daemon.socket_path!r})\n"
        "print('STATUS', s.answers, s.status)\n"
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", probe],
        env={"PATH": PATH, "PYTHONPATH": sys_path}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc
    assert "RUN-LOCALLY" in proc.stdout and "run in-process" in proc.stdout, proc.stdout
    assert "STATUS True other mount namespace" in proc.stdout, proc.stdout
