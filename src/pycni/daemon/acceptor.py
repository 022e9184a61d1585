"""Accepting connections: the caller check at accept, the connection limit, EMFILE back-off.

Main thread only, driven by the daemon's selector. Each accepted connection is checked
(peer.py) before a byte is read: callers that may not be served are answered at once and
closed; callers in another mount or user namespace are told to run the plugin themselves.
Accepting pauses — with a log line at most every PAUSE_LOG_INTERVAL, never a busy loop —
when ``max_connections`` are open (resumed when one closes) or when the process runs out of
fds (resumed after a back-off of 0.1 s doubling to 2 s). Entry points that get no
acknowledgement meanwhile run the plugin in-process.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import selectors
import socket
import time
from collections.abc import Callable

from pycni.daemon import protocol
from pycni.daemon.peer import OUT_OF_FDS, REFUSE, RUN_LOCALLY, PeerChecker
from pycni.daemon.protocol import Reply
from pycni.daemon.request_io import ReplyWriter
from pycni.daemon.stats import Stats, new_record
from pycni.spec.errors import IO_FAILURE, TRY_AGAIN_LATER, CNIError

log = logging.getLogger("pycni.daemon")

BACKOFF = (0.1, 2.0)  # first and longest pause after EMFILE/ENFILE
PAUSE_LOG_INTERVAL = 10.0  # at most one pause line and one resume line per this many seconds
PER_WAKEUP = 64  # connections accepted before the other sockets get a turn
FD_RESERVE = 64  # fds kept free for the plugins, plus 16 per worker

Admit = Callable[[socket.socket, int], None]


def connection_limit(workers: int, given: int | None) -> int:
    """``given``, or as many connections as the fd limit holds (each may carry 3 fds: the
    socket and two netns fds). The soft limit is raised to the hard one either way: the
    plugins' fds count too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    fd_limit = soft if soft != resource.RLIM_INFINITY else 1 << 20
    return given or max(4, (fd_limit - FD_RESERVE - 16 * workers) // 3)


class RateLimitedLog:
    """At most ``per_second`` warnings; the ones left out are counted in the next."""

    def __init__(self, logger: logging.Logger, per_second: float) -> None:
        self._log = logger
        self._interval = 1.0 / per_second
        self._next = 0.0
        self._suppressed = 0

    def warning(self, msg: str, *args: object) -> None:
        self._emit(logging.WARNING, msg, args)

    def info(self, msg: str, *args: object) -> None:
        self._emit(logging.INFO, msg, args)

    def _emit(self, level: int, msg: str, args: tuple[object, ...]) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            msg += f" (and {self._suppressed} more not logged)"
            self._suppressed = 0
        self._next = now + self._interval
        self._log.log(level, msg, *args)


def answer_at_once(sock: socket.socket, reply: Reply, stats: Stats, kind: str, note: str) -> None:
    """Best effort, never blocking: a fresh socket's send buffer takes a small reply."""
    rec = new_record(kind)
    rec.note = note
    rec.exit_code = reply.exit_code
    with contextlib.suppress(OSError):
        ReplyWriter(reply).write(sock)
    sock.close()
    stats.record(rec)


class Acceptor:
    def __init__(
        self,
        listener: socket.socket,
        sel: selectors.BaseSelector,
        *,
        max_connections: int,
        stats: Stats,
        admit: Admit,
        open_count: Callable[[], int],
    ) -> None:
        self.listener = listener
        self.max_connections = max_connections
        self._sel = sel
        self._stats = stats
        self._admit = admit
        self._open_count = open_count
        self._peers = PeerChecker()
        self._accepting = False
        self.resume_at: float | None = None
        self._backoff = BACKOFF[0]
        self._pause_reason = ""
        self._refusal_log = RateLimitedLog(log, per_second=1.0)
        # At the connection limit every close resumes and the next accept pauses again:
        # hundreds of episodes a second under pressure, so their lines are rate-limited.
        self._pause_log = RateLimitedLog(log, per_second=1.0 / PAUSE_LOG_INTERVAL)
        self._resume_log = RateLimitedLog(log, per_second=1.0 / PAUSE_LOG_INTERVAL)

    def resume(self) -> None:
        if not self._accepting:
            self._sel.register(self.listener, selectors.EVENT_READ, self)
            self._accepting = True
        self.resume_at = None

    def close(self) -> None:
        if self._accepting:
            self._sel.unregister(self.listener)
        self._accepting = False
        self.listener.close()

    def _pause(self, reason: str, resume_in: float | None) -> None:
        if self._accepting:
            self._sel.unregister(self.listener)
        self._accepting = False
        self.resume_at = None if resume_in is None else time.monotonic() + resume_in
        if reason != self._pause_reason:
            self._pause_log.warning(
                "not accepting connections: %s (%d open)%s; callers fall back to running "
                "plugins themselves",
                reason,
                self._open_count(),
                f", retrying in {resume_in:g}s" if resume_in is not None else "",
            )
            self._pause_reason = reason

    def _back_off(self, why: str) -> None:
        self._stats.bump("accept_backoffs")
        delay = self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF[1])
        self._pause(f"accept failed: {why}", delay)

    def maybe_resume(self) -> None:
        """Called once per loop turn: resume when under the limit and the back-off is over."""
        if self._accepting or self._open_count() >= self.max_connections:
            return
        if self.resume_at is None or time.monotonic() >= self.resume_at:
            self.resume()

    def accept_some(self) -> None:
        for _ in range(PER_WAKEUP):
            if self._open_count() >= self.max_connections:
                self._pause(f"connection limit of {self.max_connections} reached", None)
                return
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                self._back_off(os.strerror(exc.errno or 0))
                return
            if not self._check(sock):
                return  # paused: out of fds
            self._backoff = BACKOFF[0]
            if self._pause_reason:
                self._resume_log.info("accepting connections again (%d open)", self._open_count())
                self._pause_reason = ""

    def _check(self, sock: socket.socket) -> bool:
        """Admit, answer or refuse one fresh connection; False when we ran out of fds.

        Answers given here precede the caller's first byte, so its protocol version is not
        known yet: they use the version-1 layout every entry point reads (accept_reply)."""
        accepted = time.perf_counter_ns()
        sock.setblocking(False)
        verdict = self._peers.check(sock)
        if verdict.action == OUT_OF_FDS:
            err = CNIError(
                TRY_AGAIN_LATER, "pycni daemon is out of file descriptors", "try again later"
            )
            reply = protocol.accept_reply(err, run_locally=True)  # nothing ran: run it there
            answer_at_once(sock, reply, self._stats, "run-locally", "no fds")
            self._back_off(verdict.reason)
            return False
        if verdict.action == REFUSE:
            self._refusal_log.warning(
                "refused a connection from pid %d uid %d: %s", verdict.pid, verdict.uid,
                verdict.reason,
            )  # fmt: skip
            err = CNIError(
                IO_FAILURE,
                "permission denied: the pycni daemon serves root only "
                "(uid 0 with CAP_NET_ADMIN and CAP_SYS_ADMIN)",
                verdict.reason,
            )
            reply = protocol.accept_reply(err, run_locally=False)
            answer_at_once(sock, reply, self._stats, "refused", verdict.reason)
        elif verdict.action == RUN_LOCALLY:
            err = CNIError(
                IO_FAILURE,
                f"pycni daemon: {verdict.reason}; run the plugin in the caller's own "
                "namespaces (installed entry points do this themselves)",
                "reinstall the entry points with `pycni plugins install DIR`",
            )
            reply = protocol.accept_reply(err, run_locally=True)
            answer_at_once(sock, reply, self._stats, "run-locally", verdict.reason)
        else:
            self._admit(sock, accepted)
        return True
