"""pycni entry point (Python form): forward this CNI plugin call to the pycni daemon.

pycni-entry-point:v1

Installed by `pycni plugins install DIR` under each plugin's type name, with a shebang
running the venv's interpreter as ``-IS`` so it starts in ~11 ms. It imports only the
standard library's built-in modules: the plugin type is argv[0]'s basename, the call goes
to the daemon over its unix socket (wire protocol: docs/daemon.md) with this process's
network namespace and the target one passed as fds, and the daemon's stdout, stderr and
exit code become ours. When no daemon answers, the plugin runs in this process instead.
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
MAGIC = b"pCNI"
VERSION = 1
# --- pycni install config end ---

KIND_CALL = 1
FLAG_CALLER_NETNS = 1
FLAG_TARGET_NETNS = 2
REPLY_SIZE = 20
TRY_AGAIN_LATER = 11


def run_in_process(plugin_type: str) -> None:
    """Import pycni (its paths were recorded at install time, -S skipped site) and run."""
    import site

    for path in reversed(IMPORT_PATHS):
        if path not in sys.path:
            sys.path.insert(0, path)
    for directory in SITE_DIRS:
        site.addsitedir(directory)
    from pycni.plugin.main import main

    main(plugin_type)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_stdin() -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            return b"".join(chunks)
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


def forward(plugin_type: str) -> int | None:
    """Send the call to the daemon; None when no daemon answered (nothing ran)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(SOCKET_PATH)
    except OSError:
        sock.close()
        return None
    try:
        flags, fds = _netns_fds()
        stdin = b"" if os.environ.get("CNI_COMMAND") == "VERSION" else _read_stdin()
        data = _request(plugin_type, flags, stdin)
        ancillary = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        cmsg = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, ancillary)] if fds else []
        sent = sock.sendmsg([data], cmsg)
        for fd in fds:
            os.close(fd)
        if sent < len(data):
            sock.sendall(data[sent:])
        prefix = _recv_exact(sock, REPLY_SIZE)
        if prefix[:4] != MAGIC or prefix[4] != VERSION or not prefix[5] & 0x80:
            raise ConnectionError("the daemon's reply is not a pycni reply")
        code = int.from_bytes(prefix[8:12], "big", signed=True)
        out = _recv_exact(sock, int.from_bytes(prefix[12:16], "big"))
        err = _recv_exact(sock, int.from_bytes(prefix[16:20], "big"))
    except OSError as exc:
        # The daemon may have run part of the call: never re-run it here (ADD is not idempotent).
        details = str(exc).replace("\\", "\\\\").replace('"', '\\"')
        msg = (
            f'{{"code": {TRY_AGAIN_LATER}, "msg": "pycni daemon failed mid-call, '
            f'try again later", "details": "{details}"}}\n'
        )
        _write_all(1, msg.encode())
        return 1
    finally:
        sock.close()
    if err:
        _write_all(2, err)
    _write_all(1, out)
    return code


def main() -> None:
    plugin_type = os.path.basename(sys.argv[0])
    if MODE == "daemon":
        code = forward(plugin_type)
        if code is not None:
            os._exit(code)
    run_in_process(plugin_type)


if __name__ == "__main__":
    main()
