"""The daemon's listening socket: the one systemd passed, or a root-only one it creates (and
removes when it stops, unless another daemon's socket has replaced it)."""

from __future__ import annotations

import contextlib
import os
import socket

from pycni.daemon.acceptor import Acceptor
from pycni.daemon.request_io import bind_listener, socket_from_systemd


class Listener:
    def __init__(self, path: str) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.from_systemd = False
        self._ino: tuple[int, int] | None = None

    def bind(self) -> None:
        """Take the socket from systemd if it passed one, else create the root-only socket."""
        sock = socket_from_systemd()
        if sock is not None:
            self.from_systemd = True
            name = sock.getsockname()
            self.path = name if isinstance(name, str) and name else self.path
        else:
            sock = bind_listener(self.path)
            st = os.stat(self.path)
            self._ino = (st.st_dev, st.st_ino)
        self.sock = sock

    def unlink(self) -> None:
        """Remove our socket file: new callers no longer find this daemon."""
        if self.from_systemd or self._ino is None:
            return  # systemd owns the socket file
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ino:
                os.unlink(self.path)
        self._ino = None

    def close(self, acceptor: Acceptor | None) -> None:
        """Stop listening (through the acceptor that serves the socket, if any)."""
        if self.sock is None:
            return
        if acceptor is not None:
            acceptor.close()
        else:
            self.sock.close()
        self.sock = None
        self.unlink()
