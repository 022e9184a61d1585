"""Autostart: an entry point that finds no daemon starts one, and that daemon leaves when idle.

The entry point (forwarder.c / forwarder.py) does the starting, because it is the process
that noticed: when ``connect()`` fails with ENOENT or ECONNREFUSED it forks twice (the
daemon gets its own session and is nobody's child), takes an exclusive ``flock`` on
``<socket>.lock`` without waiting, and execs ``python -IS -c DAEMON_CODE`` with the same
options as ``pycni daemon`` plus ``--autostart-lock-fd 3``. The current call does not wait
for it: it runs the plugin in-process, exactly as it would have without autostart. Forking
keeps the caller's network and mount namespaces (the node's: the entry point runs there;
the pod's namespace is only ever opened, never entered).

The lock is held by the daemon for its whole life, so "lock taken" means "an autostarted
daemon is starting or serving": exactly one daemon per socket, even when many calls find no
daemon at once, and a daemon killed with SIGKILL releases it (the next call starts another).

This module is the daemon's side: the file names, the lock check and the idle clock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time

IDLE_EXIT_DEFAULT = 300.0  # seconds without a call before an autostarted daemon exits
LOG_LIMIT = 8 << 20  # an autostart log larger than this is emptied when a daemon starts

# How a daemon was started (health "startedBy", metric pycni_daemon_info{started_by}).
AUTOSTART = "autostart"
SOCKET_ACTIVATION = "socket-activation"
SYSTEMD = "systemd"
MANUAL = "manual"


def lock_path(socket_path: str) -> str:
    """The autostart lock beside the socket (held by the autostarted daemon while it lives)."""
    return socket_path + ".lock"


def log_path(socket_path: str) -> str:
    """Where an autostarted daemon's stdout and stderr go."""
    return socket_path + ".log"


class LockError(Exception):
    """The fd given with --autostart-lock-fd is not the held autostart lock."""


def adopt_lock(fd: int, socket_path: str) -> None:
    """Check that ``fd`` is the lock file beside ``socket_path`` and that we hold it.

    It stays open (close-on-exec, so plugins never inherit it) until the process exits.
    """
    try:
        st = os.fstat(fd)
        expected = os.lstat(lock_path(socket_path))
    except OSError as exc:
        raise LockError(f"autostart lock fd {fd}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (
        expected.st_dev,
        expected.st_ino,
    ):
        raise LockError(f"fd {fd} is not {lock_path(socket_path)}")
    try:  # the same open file description: succeeds at once when the lock is ours
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise LockError(f"{lock_path(socket_path)} is held by another process") from None
    os.set_inheritable(fd, False)


def trim_log(fd: int = 2) -> None:
    """Empty the autostart log (our stderr, opened O_APPEND) once it grew past LOG_LIMIT."""
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > LOG_LIMIT:
            os.ftruncate(fd, 0)


def how_started(autostarted: bool, socket_activated: bool) -> str:
    if autostarted:
        return AUTOSTART
    if socket_activated:
        return SOCKET_ACTIVATION
    if os.environ.get("INVOCATION_ID"):  # set by systemd for every unit it runs
        return SYSTEMD
    return MANUAL


class IdleClock:
    """When the daemon has had no call for ``seconds`` (0: never), it is time to leave."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last = time.monotonic()

    def touch(self) -> None:
        self._last = time.monotonic()

    def due_in(self, now: float) -> float | None:
        """Seconds until idle exit (<= 0: now), or None when it never exits."""
        if self.seconds <= 0:
            return None
        return self._last + self.seconds - now
