"""pycni entry point (Python form): forward this CNI plugin call to the pycni daemon.

pycni-entry-point:v1

Installed by `pycni plugins install DIR` under each plugin's type name, with a shebang
running the venv's interpreter as ``-IS`` so it starts fast. It imports only the
standard library's built-in modules: the plugin type is argv[0]'s basename, the call goes
to the daemon over its unix socket (wire protocol: docs/daemon.md) with this process's
network namespace and the target one passed as fds, and the daemon's stdout, stderr and
exit code become ours. When no daemon answers, or the daemon says so (we are in another
mount namespace), the plugin runs in this process instead.

All of stdin is read before connecting (a slow writer never holds the daemon), and a server
that is not root (SO_PEERCRED) is refused before anything is sent. The call is sent only once
the daemon acknowledged a HELLO (within ACK_TIMEOUT_MS): a daemon that does not, or that
speaks another protocol version, got no call, and the plugin runs here. After the call was
sent, the reply is awaited for the bound the acknowledgement announced (+ REPLY_SLACK_MS);
then the call may have run, so it is not re-run: CNI error 11.

Autostart (when installed with it): if no socket or a stale one is found, a daemon is
started in the background first (two forks, setsid, flock of LOCK_PATH or leave, wait until
this call is over, exec `pycni daemon`), then this call runs in-process as without it
(src/pycni/daemon/autostart.py).
"""

from __future__ import annotations

import _socket
import os
import sys

# --- pycni install config begin ---
SOCKET_PATH = "/run/pycni/pycni.sock"
MODE = "daemon"
IMPORT_PATHS: list[str] = []
SITE_DIRS: list[str] = []
AUTOSTART = False
IDLE_EXIT = "300"
LOCK_PATH = "/run/pycni/pycni.sock.lock"
LOG_PATH = "/run/pycni/pycni.sock.log"
ENTRY_CONFIG = "pycni-entry-config:form=python;autostart=no;socket=/run/pycni/pycni.sock"
DAEMON_CODE = ""
MAGIC = b"pCNI"
VERSION = 2
# --- pycni install config end ---

# Checked against pycni.daemon.protocol by tests/unit/test_entrypoints_wire_constants.py.
KIND_CALL = 1
KIND_HELLO = 4
LEGACY_VERSION = 1
REPLY_BIT = 0x80
FLAG_CALLER_NETNS = 1
FLAG_TARGET_NETNS = 2
REPLY_RUN_LOCALLY = 1
REPLY_AT_ACCEPT = 2
PREFIX_SIZE = 16
REPLY_SIZE = 20
MAX_BODY = 16 << 20
MAX_REPLY_PART = 64 << 20
CONNECT_TIMEOUT_MS = 1000
ACK_TIMEOUT_MS = 2000
REPLY_SLACK_MS = 5000
TRY_AGAIN_LATER = 11
IO_FAILURE = 5
INTERNAL = 999


class RunLocally(Exception):
    """Nothing ran in a daemon: run the plugin in this process."""


def run_in_process(plugin_type: str, stdin: bytes | None, args: list[str] | None = None) -> None:
    """Import pycni (its paths were recorded at install time, -S skipped site) and run.

    ``stdin`` is what we already consumed; it is put back on fd 0 (a memfd) for the plugin.
    """
    import site

    if stdin is not None:
        fd = os.memfd_create("pycni-stdin", os.MFD_CLOEXEC)
        _write_all(fd, stdin)
        os.lseek(fd, 0, os.SEEK_SET)
        os.dup2(fd, 0)
        os.close(fd)

    for path in reversed(IMPORT_PATHS):
        if path not in sys.path:
            sys.path.insert(0, path)
    for directory in SITE_DIRS:
        site.addsitedir(directory)
    from pycni.skel.main import main

    main(plugin_type, args)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fail(code: int, msg: str, details: str) -> int:
    details = "".join(c if c >= " " and c not in '"\\' else f"\\u{ord(c):04x}" for c in details)
    text = f'{{"code": {code}, "msg": "{msg}", "details": "{details}"}}\n'
    _write_all(1, text.encode())
    return 1


def _read_stdin() -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY:
            raise ValueError("the network configuration on stdin is too large")
        chunks.append(chunk)


def _recv_exact(sock: _socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"daemon closed the connection after {len(buf)} of {size} bytes")
        buf += chunk
    return bytes(buf)


def _netns_fds() -> tuple[int, list[int]]:
    flags = 0
    fds = []
    try:
        fds.append(os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
        flags |= FLAG_CALLER_NETNS
    except OSError:
        pass
    target = os.environ.get("CNI_NETNS", "")
    if target:
        try:
            fds.append(os.open(target, os.O_RDONLY | os.O_CLOEXEC))
            flags |= FLAG_TARGET_NETNS
        except OSError:
            pass  # the plugin reports the missing namespace (DEL tolerates it)
    return flags, fds


def _request(plugin_type: str, flags: int, stdin: bytes) -> bytes:
    head = [plugin_type.encode("utf-8", "surrogateescape"), b"\0"]
    for key, value in os.environb.items():
        head += [key, b"=", value, b"\0"]
    head_bytes = b"".join(head)
    prefix = (
        MAGIC
        + bytes([VERSION, KIND_CALL])
        + flags.to_bytes(2, "big")
        + len(head_bytes).to_bytes(4, "big")
        + len(stdin).to_bytes(4, "big")
    )
    return prefix + head_bytes + stdin


CALLER_WAIT = 30.0  # seconds; then the daemon starts anyway
LOCK_RETRIES = 40  # x LOCK_RETRY: 2 s for an exiting daemon to let go of the lock
LOCK_RETRY = 0.05


def _start_daemon(caller: int | None) -> None:
    """In the grandchild: own session, stdio on the log, the lock on fd 3, exec the daemon
    once the call that started it (``caller``, a pidfd of this process) is over."""
    import fcntl
    import time

    try:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        try:  # the daemon's own rule: a root-owned directory nobody else can write
            st = os.lstat(os.path.dirname(SOCKET_PATH))
            if not (st.st_mode & 0o170000 == 0o040000 and st.st_uid == 0 and not st.st_mode & 0o22):
                os._exit(0)
        except FileNotFoundError:
            pass  # created 0700 below
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            lock = os.open(LOCK_PATH, flags, 0o600)
        except FileNotFoundError:
            os.mkdir(os.path.dirname(SOCKET_PATH), 0o700)
            lock = os.open(LOCK_PATH, flags, 0o600)
        # The runtime's stdout and stderr are let go before any waiting, the lock's included:
        # a runtime reads them to their end, so it would wait as long as we hold them.
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        log = os.open(LOG_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # Held: another daemon is starting or serving, or one that left when idle is still
        # closing its files (its socket is gone already). Only the last lasts long: retry.
        for tries in range(LOCK_RETRIES + 1):
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if tries == LOCK_RETRIES:
                    raise
                time.sleep(LOCK_RETRY)
        if caller is not None:  # importing the plugins takes CPU the in-process call needs
            import select

            select.select([caller], [], [], CALLER_WAIT)
            os.close(caller)
        if lock != 3:
            os.dup2(lock, 3)
        os.set_inheritable(3, True)  # the daemon holds the lock for its whole life
        os.closerange(4, 65536)  # the runtime's pipes must not stay open in the daemon
        os.chdir("/")
        os.umask(0o077)
        args = [sys.executable, "-IS", "-c", DAEMON_CODE, "--socket", SOCKET_PATH]
        args += ["--idle-exit", IDLE_EXIT, "--autostart-lock-fd", "3"]
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        os.execve(sys.executable, args, {**env, "LANG": "C.UTF-8"})
    finally:
        os._exit(0)


def autostart() -> None:
    """No daemon answered: start one in the background for the next calls (root only)."""
    if not AUTOSTART or os.geteuid() != 0:
        return
    try:
        caller: int | None = os.pidfd_open(os.getpid())  # pinned now: no pid reuse
    except OSError:
        caller = None
    try:
        child = os.fork()
    except OSError:
        child = -1
    if child == 0:
        _start_daemon(caller)
    try:
        if child > 0:
            os.waitpid(child, 0)
    except ChildProcessError:
        pass  # SIGCHLD ignored by our caller: the child was reaped already
    if caller is not None:
        os.close(caller)


def _connect() -> _socket.socket | None:
    """Connect (a full backlog gives up after CONNECT_TIMEOUT_MS); None when nothing answered.

    No socket or a stale one (no daemon at all, not a busy one) autostarts a daemon.
    """
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, _timeval(CONNECT_TIMEOUT_MS))
        sock.connect(SOCKET_PATH)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, bytes(16))
    except OSError as exc:
        sock.close()
        if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
            autostart()
        return None
    return sock


def _server_uid(sock: _socket.socket) -> int:
    cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(cred[4:8], sys.byteorder, signed=True)


def _timeval(ms: int) -> bytes:
    return (ms // 1000).to_bytes(8, sys.byteorder) + (ms % 1000 * 1000).to_bytes(8, sys.byteorder)


def _read_prefix(sock: _socket.socket) -> bytes:
    prefix = _recv_exact(sock, REPLY_SIZE)
    if prefix[:4] != MAGIC or not prefix[5] & REPLY_BIT:
        raise ConnectionError("the daemon's reply is not a pycni reply")
    return prefix


def _read_reply(sock: _socket.socket, prefix: bytes) -> tuple[int, bytes, bytes]:
    code = int.from_bytes(prefix[8:12], "big", signed=True)
    out_len = int.from_bytes(prefix[12:16], "big")
    err_len = int.from_bytes(prefix[16:20], "big")
    if out_len > MAX_REPLY_PART or err_len > MAX_REPLY_PART:
        raise ConnectionError("the daemon's reply is too large")
    return code, _recv_exact(sock, out_len), _recv_exact(sock, err_len)


def _hello(sock: _socket.socket) -> tuple[int, bytes, bytes] | int:
    """Ask the daemon whether it serves us: the reply bound in ms once it acknowledged, or
    its final answer (a refusal). Raises RunLocally when it ran, and will run, nothing: no
    acknowledgement within ACK_TIMEOUT_MS, another protocol version, or its own say-so."""
    hello = MAGIC + bytes([VERSION, KIND_HELLO]) + bytes(10)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVTIMEO, _timeval(ACK_TIMEOUT_MS))
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            sock.sendall(hello)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered at accept without reading (a refusal): its reply is waiting
        prefix = _read_prefix(sock)
    except OSError:
        raise RunLocally from None  # silent or gone before the acknowledgement: no call sent
    flags = int.from_bytes(prefix[6:8], "big")
    if flags & REPLY_RUN_LOCALLY:
        raise RunLocally
    if prefix[4] == VERSION and prefix[5] == KIND_HELLO | REPLY_BIT:
        return int.from_bytes(prefix[8:12], "big", signed=True)
    if prefix[4] == LEGACY_VERSION and flags & REPLY_AT_ACCEPT:
        return _read_reply(sock, prefix)  # refused before it read a byte
    raise RunLocally  # a daemon of another version: it ran nothing


def _exchange(sock: _socket.socket, data: bytes, fds: list[int]) -> tuple[int, bytes, bytes]:
    answer = _hello(sock)
    if not isinstance(answer, int):
        return answer
    sock.setsockopt(
        _socket.SOL_SOCKET, _socket.SO_RCVTIMEO, _timeval(max(answer, 0) + REPLY_SLACK_MS)
    )
    ancillary = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    cmsg = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, ancillary)] if fds else []
    try:
        sent = sock.sendmsg([data], cmsg)
        if sent < len(data):
            sock.sendall(data[sent:])
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon answered without reading all (an error): its reply is waiting
    try:
        prefix = _read_prefix(sock)
    except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO ran out
        raise TimeoutError(
            f"no reply within {(max(answer, 0) + REPLY_SLACK_MS) / 1000:g}s (the bound the "
            "daemon announced); the call may have run, so it is not re-run"
        ) from None
    if prefix[4] != VERSION:
        raise ConnectionError("the daemon's reply is not a pycni reply")
    if int.from_bytes(prefix[6:8], "big") & REPLY_RUN_LOCALLY:
        raise RunLocally
    return _read_reply(sock, prefix)


def forward(plugin_type: str, stdin: bytes) -> int | None:
    """Send the call to the daemon; None when it must run here (nothing ran in a daemon)."""
    sock = _connect()
    if sock is None:
        return None
    try:
        uid = _server_uid(sock)
        if uid != 0:
            return _fail(
                IO_FAILURE,
                "pycni: refusing the daemon socket: its server is not root",
                f"{SOCKET_PATH} is served by uid {uid}",
            )
        flags, fds = _netns_fds()
        try:
            code, out, err = _exchange(sock, _request(plugin_type, flags, stdin), fds)
        finally:
            for fd in fds:
                os.close(fd)
    except RunLocally:
        return None
    except OSError as exc:
        # The daemon may have run part of the call: never re-run it here (ADD is not idempotent).
        return _fail(TRY_AGAIN_LATER, "pycni daemon failed mid-call, try again later", str(exc))
    finally:
        sock.close()
    if err:
        _write_all(2, err)
    _write_all(1, out)
    return code


def main() -> None:
    plugin_type = os.path.basename(sys.argv[0])
    if sys.argv[1:2] == ["daemon"]:  # the plugin's own command line (`dhcp daemon`)
        run_in_process(plugin_type, None, sys.argv[1:])
        return
    if MODE != "daemon":
        run_in_process(plugin_type, None)
        return
    stdin: bytes | None = None
    if os.environ.get("CNI_COMMAND") != "VERSION":
        try:
            stdin = _read_stdin()
        except (OSError, ValueError) as exc:
            os._exit(_fail(IO_FAILURE, "pycni: cannot read the network configuration", str(exc)))
    code = forward(plugin_type, stdin or b"")
    if code is not None:
        os._exit(code)
    run_in_process(plugin_type, stdin)


if __name__ == "__main__":
    main()
