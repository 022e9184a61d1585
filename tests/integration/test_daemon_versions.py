"""Entry points and daemons of different protocol versions agree to run the call in-process
(issue 26, item 5), with both entry-point forms in both directions:

- version-1 entry points (the C and Python forwarders as they were before version 2, frozen in
  tests/integration/compat/) against this daemon: the daemon answers RUN_LOCALLY in the
  version-1 layout, runs nothing, and says so once in its log however many calls come;
- this version's entry points against a version-1 daemon (which answers any other version's
  request with its version-1 error reply, code 6): they run the plugin in-process, having sent
  the daemon nothing but their HELLO.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from pycni.daemon import protocol
from pycni.entrypoints import build, install
from pycni.spec.errors import CNIError
from tests.integration.daemon_proc import DaemonProc

pytestmark = pytest.mark.kernel

COMPAT = Path(__file__).parent / "compat"
FORMS = ("c", "python")


def _v1_python(socket_path: str) -> bytes:
    """The version-1 Python forwarder with this install's config (paths, socket), version 1."""
    current = install.python_script(socket_path, "daemon").decode()
    shebang, _, body = current.partition("\n")
    block = install._CONFIG_BLOCK.search(body)
    assert block is not None
    config = block.group(0).replace(f"VERSION = {protocol.VERSION}\n", "VERSION = 1\n")
    template = (COMPAT / "forwarder_v1.py.txt").read_text()
    script, count = install._CONFIG_BLOCK.subn(lambda _m: config, template)
    assert count == 1 and "VERSION = 1\n" in script
    return f"{shebang}\n{script}".encode()


def _v1_c(socket_path: str) -> bytes:
    settings = build.ForwarderSettings(
        socket_path, install.interpreter(), install.fallback_code(), None, 0,
        install.config_line("c", False, 0, socket_path),
    )  # fmt: skip
    header = build.config_header(settings).replace(
        f"#define PYCNI_PROTOCOL_VERSION {protocol.VERSION}", "#define PYCNI_PROTOCOL_VERSION 1"
    )
    assert "#define PYCNI_PROTOCOL_VERSION 1" in header
    compiler = build.find_compiler()
    # make setup-test installs gcc (scripts/setup-system.sh): without it this is a failure
    assert compiler is not None, "no C compiler: run `make setup-test` (installs gcc)"
    return build._compile(compiler, (COMPAT / "forwarder_v1.c").read_text(), header, False)


def _install_v1(directory: Path, form: str, socket_path: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "loopback"
    path.write_bytes(_v1_c(socket_path) if form == "c" else _v1_python(socket_path))
    path.chmod(stat.S_IRWXU)
    return path


def _version(entry: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(entry)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=120
    )


def _assert_ran_in_process(proc: subprocess.CompletedProcess[bytes]) -> None:
    assert proc.returncode == 0, proc
    assert "1.0.0" in json.loads(proc.stdout)["supportedVersions"], proc


@pytest.mark.parametrize("form", FORMS)
def test_version_1_entry_point_against_this_daemon_runs_in_process(
    form: str, daemon: DaemonProc, short_dir: Path
) -> None:
    entry = _install_v1(short_dir / f"v1{form}", form, daemon.socket_path)
    calls, local = daemon.calls(), daemon.count("run_locally")
    for _ in range(3):
        _assert_ran_in_process(_version(entry))
    assert daemon.count("run_locally", local + 3) == local + 3
    assert daemon.calls() == calls  # nothing ran in the daemon
    # A version-1 client's raw view: the version-1 layout with RUN_LOCALLY (what it reads).
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(20)
        conn.connect(daemon.socket_path)
        head = protocol.encode_call_head("loopback", {"CNI_COMMAND": "VERSION"})
        conn.sendall(protocol.REQUEST_PREFIX.pack(b"pCNI", 1, 1, 0, len(head), 0) + head)
        reply = conn.recv(20)
    assert reply[4] == 1 and reply[5] == 0x81, reply
    assert int.from_bytes(reply[6:8], "big") & protocol.REPLY_RUN_LOCALLY
    assert daemon.stop() == 0
    assert daemon.log.read_text().count("speaks protocol version 1") == 1


def _v1_daemon(sock_path: str, connections: int) -> list[bytes]:
    """A stand-in for a version-1 daemon, byte for byte what it answers a request of another
    version: its error reply (code 6) in the version-1 layout, before reading any further."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen(8)
    received: list[bytes] = []

    def serve() -> None:
        with listener:
            for _ in range(connections):
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(20)
                    prefix = conn.recv(16)
                    received.append(prefix)
                    err = CNIError(
                        6,
                        f"pycni daemon protocol version {prefix[4]} not supported "
                        "(daemon speaks 1)",
                        "reinstall the entry points with `pycni plugins install DIR`",
                    )
                    conn.sendall(protocol.encode_reply(protocol.error_reply(err, version=1)))
                    conn.settimeout(5)
                    try:
                        received.append(conn.recv(65536))  # what came after: nothing
                    except ConnectionResetError:  # closed with our reply partly unread
                        received.append(b"")
                    except OSError:
                        received.append(b"<timeout>")

    threading.Thread(target=serve, daemon=True).start()
    return received


@pytest.mark.parametrize("form", FORMS)
def test_this_entry_point_against_a_version_1_daemon_runs_in_process(
    form: str, short_dir: Path
) -> None:
    sock_path = str(short_dir / "v1.sock")
    received = _v1_daemon(sock_path, 2)
    install.install(short_dir / form, socket_path=sock_path, form=form, names=["loopback"])
    for _ in range(2):
        _assert_ran_in_process(_version(short_dir / form / "loopback"))
    hello = protocol.encode_request(protocol.KIND_HELLO)
    assert received == [hello, b"", hello, b""]  # the HELLO only; never the call
