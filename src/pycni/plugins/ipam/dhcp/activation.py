"""The listening socket systemd hands the daemon (``cni-dhcp.socket``: socket activation).

systemd's protocol (sd_listen_fds(3)): ``LISTEN_PID`` is our PID, ``LISTEN_FDS`` the count of
sockets from fd 3 on, ``LISTEN_FDNAMES`` their names. As the reference: no variables (or
another process's) means none passed and the daemon binds its own socket; one socket is used;
more than one is an error. The variables are removed so children do not see them. Unlike the
reference, which takes any listener, the socket must be a listening unix stream socket: the
plugin passes the pod namespace over it as an fd.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping

FIRST_FD = 3
_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class ActivationError(OSError):
    """systemd passed something the daemon cannot serve on."""


def listener(
    env: MutableMapping[str, str] | None = None, pid: int | None = None
) -> socket.socket | None:
    """The socket systemd passed (blocking, close-on-exec), or None when it passed none."""
    env = os.environ if env is None else env
    mine = env.get("LISTEN_PID", "") == str(os.getpid() if pid is None else pid)
    raw_count = env.get("LISTEN_FDS", "")
    if mine:
        for var in _VARIABLES:
            env.pop(var, None)
    if not mine:
        return None
    try:
        count = int(raw_count)
    except ValueError:
        raise ActivationError(f"LISTEN_FDS={raw_count!r} is not a number") from None
    if count <= 0:
        return None
    if count > 1:
        raise ActivationError(f"Too many ({count}) FDs passed through socket activation")
    try:
        sock = socket.socket(fileno=FIRST_FD)
    except OSError as exc:
        raise ActivationError(f"LISTEN_FDS=1 but no FD found: {exc.strerror}") from None
    try:
        os.set_inheritable(FIRST_FD, False)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ActivationError("the socket systemd passed is not a unix stream socket")
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ActivationError("the socket systemd passed is not listening")
    except BaseException:
        sock.detach()  # fd 3 is systemd's: leave it as it was
        raise
    sock.setblocking(True)
    return sock
