"""Plugin ↔ daemon wire format: one JSON request, one JSON reply, per unix-socket connection.

The plugin passes the pod namespace as an open file descriptor (SCM_RIGHTS) next to its path,
so the daemon needs no path translation (the reference's ``-hostprefix``) and cannot open a
different namespace that reused the path. Requests: ``{"method": "allocate"|"release"|"ping",
"containerID", "netns", "ifName", "args", "config"}``; replies: ``{"result": …}`` or
``{"error": {"code", "msg"}}``.
"""

from __future__ import annotations

import array
import json
import socket
from typing import Any

DEFAULT_SOCKET = "/run/cni/dhcp.sock"
MAX_MESSAGE = 1 << 20


class DaemonUnreachable(OSError):
    """No daemon answers on the socket."""


def _read_line(sock: socket.socket, first: bytes) -> bytes:
    data = first
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_MESSAGE:
            raise ValueError("message too long")
    return data


def call(path: str, request: dict[str, Any], fd: int | None, timeout: float) -> dict[str, Any]:
    """Send ``request`` (and ``fd``) to the daemon at ``path``; its decoded reply."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise DaemonUnreachable(exc.errno, f"dial unix {path}: {exc.strerror}") from None
        payload = json.dumps(request).encode() + b"\n"
        ancillary = []
        if fd is not None:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]
        sock.sendmsg([payload], ancillary)
        reply = _read_line(sock, b"")
    finally:
        sock.close()
    decoded = json.loads(reply)
    if not isinstance(decoded, dict):
        raise ValueError("daemon reply is not an object")
    return decoded


def receive(conn: socket.socket) -> tuple[dict[str, Any], int | None]:
    """Server side: the request and the passed fd (the caller owns and closes it)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, raw in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(raw[: len(raw) - len(raw) % fds.itemsize])
    for extra in fds[1:]:
        socket.close(extra)
    fd = fds[0] if fds else None
    try:
        request = json.loads(_read_line(conn, data))
    except (ValueError, OSError):
        if fd is not None:
            socket.close(fd)
        raise
    if not isinstance(request, dict):
        if fd is not None:
            socket.close(fd)
        raise ValueError("request is not an object")
    return request, fd


def reply(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")
