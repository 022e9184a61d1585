"""A Python client for the pycni daemon: calls, health (ping) and stats.

Used by ``pycni daemon --stats``, by STATUS-style health checks and by tests. The installed
entry points do not use it (they must start without importing pycni).
"""

from __future__ import annotations

import array
import contextlib
import json
import socket
import struct
from collections.abc import Mapping
from typing import Any

from pycni.daemon import protocol
from pycni.daemon.protocol import Reply


class DaemonUnavailable(Exception):
    """No daemon accepted the connection: nothing ran, so running in-process is safe."""


class RunLocally(ConnectionError):
    """The daemon answers but serves no call from this caller's mount namespace (e.g. a shell
    under `ip netns exec`, which makes one per command) or user namespace: calls from here
    run in-process."""


class NotRoot(ConnectionError):
    """The server on the socket is not root: not a pycni daemon, nothing was sent to it."""


def _connect(socket_path: str, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(socket_path)
    except OSError as exc:
        sock.close()
        raise DaemonUnavailable(f"no pycni daemon on {socket_path}: {exc.strerror or exc}") from exc
    _pid, uid, _gid = struct.unpack(
        "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    )
    if uid != 0:
        sock.close()
        raise NotRoot(f"refusing {socket_path}: its server runs as uid {uid}, not root")
    return sock


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"daemon closed the connection after {len(buf)} of {size} bytes")
        buf += chunk
    return bytes(buf)


def exchange(
    socket_path: str, data: bytes, fds: list[int] | None = None, *, timeout: float | None = None
) -> Reply:
    """Send one encoded request (fds attached to its first byte) and read the reply.

    Raises DaemonUnavailable when the connect fails and OSError (ConnectionError) when the
    daemon fails afterwards: the call may then have run, so callers must not retry blindly.
    """
    sock = _connect(socket_path, timeout)
    try:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        # A refusal is answered at accept, unread: its reply waits even when sending fails.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sent = sock.sendmsg([data], ancillary)
            if sent < len(data):
                sock.sendall(data[sent:])
        head = protocol.parse_reply_header(_recv_exact(sock, protocol.REPLY_PREFIX.size))
        out = _recv_exact(sock, head.stdout_len)
        err = _recv_exact(sock, head.stderr_len)
        return Reply(head.exit_code, out, err, head.kind, head.flags)
    except ValueError as exc:
        raise ConnectionError(str(exc)) from exc
    finally:
        sock.close()


def call(
    socket_path: str,
    plugin_type: str,
    env: Mapping[str, str],
    stdin: bytes = b"",
    *,
    caller_netns_fd: int | None = None,
    target_netns_fd: int | None = None,
    timeout: float | None = None,
) -> Reply:
    """Run one plugin call in the daemon (the fds are sent, not closed)."""
    flags = 0
    fds: list[int] = []
    if caller_netns_fd is not None:
        flags |= protocol.FLAG_CALLER_NETNS
        fds.append(caller_netns_fd)
    if target_netns_fd is not None:
        flags |= protocol.FLAG_TARGET_NETNS
        fds.append(target_netns_fd)
    data = protocol.encode_request(protocol.KIND_CALL, plugin_type, dict(env), stdin, flags=flags)
    return exchange(socket_path, data, fds, timeout=timeout)


def _json_request(socket_path: str, kind: int, timeout: float) -> dict[str, Any]:
    reply = exchange(socket_path, protocol.encode_request(kind), timeout=timeout)
    if reply.flags & protocol.REPLY_RUN_LOCALLY:
        raise RunLocally(
            f"the daemon on {socket_path} answers, but not callers in this mount namespace "
            "(another one than the daemon's, e.g. under `ip netns exec`) or user namespace: "
            "plugin calls made from here run in-process"
        )
    data = json.loads(reply.stdout)
    if reply.exit_code != 0 or not isinstance(data, dict):
        raise ConnectionError(
            f"daemon answered with an error: {reply.stdout.decode(errors='replace')}"
        )
    return data


def ping(socket_path: str = protocol.DEFAULT_SOCKET, timeout: float = 2.0) -> dict[str, Any]:
    """The daemon's health: {"status": "ok", "pid", "protocolVersion", "plugins", ...}."""
    return _json_request(socket_path, protocol.KIND_PING, timeout)


def stats(socket_path: str = protocol.DEFAULT_SOCKET, timeout: float = 5.0) -> dict[str, Any]:
    """Counts and per-phase timings (recv, queue, run, send, total) of recent calls."""
    return _json_request(socket_path, protocol.KIND_STATS, timeout)
