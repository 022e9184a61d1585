"""The warm daemon: runs plugin calls forwarded by the entry points, with every plugin imported.

One connection carries one call (protocol.py). The main thread owns every socket: it
accepts and checks the caller before reading a byte (acceptor.py, peer.py), reads requests
without blocking (transport.py), answers ping and stats itself, admits calls into
per-container lanes with bounds (lanes.py), hands them to worker threads that live in the
daemon's home network namespace (pool.py), and writes the replies. Deadlines (request
receipt, call, reply) are timers of the main loop, so a slow client or a hung plugin holds
a worker at most until the call's deadline and never delays a call for another container.
What a call does is policy.py; the counters are stats.py.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import queue
import resource
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pycni.fast import autostart, policy, protocol
from pycni.fast.acceptor import Acceptor
from pycni.fast.lanes import Admission, Lanes
from pycni.fast.policy import Runner
from pycni.fast.pool import WorkerPool
from pycni.fast.protocol import Reply, Request
from pycni.fast.stats import CallRecord, Stats, error_code, ms, new_record
from pycni.fast.transport import (
    ReplyWriter,
    RequestReader,
    SocketSetupError,
    bind_listener,
    peer_hung_up,
    socket_from_systemd,
)
from pycni.runtime.exec import CallControl
from pycni.spec.errors import TRY_AGAIN_LATER, CNIError

log = logging.getLogger("pycni.daemon")

__all__ = ["Daemon", "SocketSetupError"]

# Defaults, documented in docs/daemon.md and docs/security.md.
RECV_TIMEOUT = 10.0  # a whole request must arrive within this (total, not per read)
CALL_TIMEOUT = 120.0  # kubelet's runtime-request-timeout: no CRI caller waits longer
SEND_TIMEOUT = 10.0  # a reply must be taken within this
CANCEL_GRACE = 2.0  # after the deadline, time for a cancelled plugin to roll back
MAX_PER_CONTAINER = 8  # admitted calls (running + waiting) for one CNI_CONTAINERID
MAX_QUEUED = 256  # admitted calls in total
FD_RESERVE = 64  # fds kept free for the plugins, plus 16 per worker
RETIRE_GRACE = 0.2  # --idle-exit: seconds the listener stays open after its file is removed


class Phase(Enum):
    RECEIVING = "receiving"
    WAITING = "waiting"  # in its container's lane behind an earlier call
    SUBMITTED = "submitted"  # handed to the pool (queued for a worker or running)
    DONE = "done"  # the worker returned (a reply may still be on its way)


@dataclass(eq=False)
class _Call:
    """One connection and the call it carries. Main thread, except the fields under ``lock``."""

    sock: socket.socket | None
    accepted_ns: int
    deadline: float
    record: CallRecord
    reader: RequestReader = field(default_factory=RequestReader)
    phase: Phase = Phase.RECEIVING
    request: Request | None = None
    key: str | None = None
    holds_lane: bool = False
    admitted: bool = False
    ready_ns: int = 0
    writer: ReplyWriter | None = None
    send_deadline: float = 0.0
    undo_if_undelivered: bool = False
    timer_gen: int = 0
    monitored: bool = True
    # shared with the worker thread
    lock: threading.Lock = field(default_factory=threading.Lock)
    cancel: threading.Event = field(default_factory=threading.Event)
    started: bool = False
    skipped: bool = False
    returned: bool = False
    abandoned: bool = False
    gone: bool = False
    timed_out: bool = False
    answered: bool = False  # an error reply was already given (deadline)
    undone: bool = False  # the worker already rolled back an ADD nobody received
    result: Reply | None = None


_WAKE = object()


def _raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class Daemon:
    def __init__(
        self,
        socket_path: str = protocol.DEFAULT_SOCKET,
        *,
        workers: int = 16,
        recv_timeout: float = RECV_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        send_timeout: float = SEND_TIMEOUT,
        cancel_grace: float = CANCEL_GRACE,
        drain_timeout: float = 120.0,
        max_per_container: int = MAX_PER_CONTAINER,
        max_queued: int = MAX_QUEUED,
        max_connections: int | None = None,
        keep_records: int = 1000,
        runner: Runner | None = None,
        idle_exit: float = 0.0,
        autostarted: bool = False,
    ) -> None:
        self.socket_path = socket_path
        self._idle = autostart.IdleClock(idle_exit)  # 0: never leave when idle
        self._retiring = False
        self._retire_at = 0.0
        self._autostarted = autostarted
        self.recv_timeout = recv_timeout
        self.call_timeout = call_timeout
        self.send_timeout = send_timeout
        self.cancel_grace = cancel_grace
        self.drain_timeout = drain_timeout
        self._runner: Runner = runner or policy.default_runner
        self._stats = Stats(keep_records)
        self._lanes: Lanes[_Call] = Lanes(max_per_container, max_queued)
        self._events: queue.SimpleQueue[tuple[str, _Call]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._pool = WorkerPool(workers, max_extra=workers, wake=self._wake)
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: Acceptor | None = None
        self._listener_ino: tuple[int, int] | None = None
        self._from_systemd = False
        self._sel: selectors.BaseSelector | None = None
        self._timers: list[tuple[float, int, int, _Call]] = []
        self._seq = itertools.count()
        self._calls: set[_Call] = set()  # open connections and calls not yet finished
        self._open_socks = 0
        fd_limit = _raise_fd_limit()
        self.max_connections = max_connections or max(
            4, (fd_limit - FD_RESERVE - 16 * workers) // 3
        )
        self.started = time.time()
        self.plugins: dict[str, str] = {}

    @property
    def workers(self) -> int:
        return self._pool.size

    # ---- lifecycle -----------------------------------------------------------------------

    def bind(self) -> None:
        """Take the socket from systemd if it passed one, else create the root-only socket."""
        listener = socket_from_systemd()
        if listener is not None:
            self._from_systemd = True
            name = listener.getsockname()
            self.socket_path = name if isinstance(name, str) and name else self.socket_path
        else:
            listener = bind_listener(self.socket_path)
            st = os.stat(self.socket_path)
            self._listener_ino = (st.st_dev, st.st_ino)
        self._listener = listener

    def serve_forever(self, *, install_signals: bool = True) -> None:
        """Serve until SIGTERM/SIGINT (or ``stop()``), then drain the calls in flight."""
        if self._listener is None:
            self.bind()
        if not self.plugins:
            self.plugins = policy.preload_plugins()
        self._pool.maintain()
        if install_signals:
            self._install_signals()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        assert self._listener is not None
        self._acceptor = Acceptor(
            self._listener,
            self._sel,
            max_connections=self.max_connections,
            stats=self._stats,
            admit=self._admit,
            open_count=lambda: self._open_socks,
        )
        self._acceptor.resume()
        log.info(
            "pycni daemon serving on %s%s with %d workers (call deadline %gs, "
            "at most %d connections)",
            self.socket_path,
            " (from systemd)" if self._from_systemd else "",
            self._pool.size,
            self.call_timeout,
            self.max_connections,
        )
        self._idle.touch()  # idle from when it can serve (importing the plugins takes a while)
        try:
            self._loop()
        finally:
            self._close_listener()
            self._drain()
            self._sel.close()

    def stop(self) -> None:
        """Ask the main loop to stop (safe from any thread and from a signal handler)."""
        self._stopping.set()
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _install_signals(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %d: no new calls, draining %d in flight", signum, len(self._calls))
            self.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _close_listener(self) -> None:
        if self._listener is None:
            return
        if self._acceptor is not None:
            self._acceptor.close()
            self._acceptor = None
        else:
            self._listener.close()
        self._listener = None
        self._unlink_socket()

    def _unlink_socket(self) -> None:
        if self._from_systemd or self._listener_ino is None:
            return  # systemd owns the socket file
        with contextlib.suppress(OSError):
            st = os.stat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._listener_ino:
                os.unlink(self.socket_path)
        self._listener_ino = None

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        while self._calls and time.monotonic() < deadline:
            self._step(min(0.2, max(0.0, deadline - time.monotonic())))
        if self._calls:
            log.warning("drain timeout: %d calls still in flight", len(self._calls))
        self._pool.stop()
        log.info("pycni daemon stopped")

    # ---- the main loop -------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._step(None)

    def _step(self, cap: float | None) -> None:
        assert self._sel is not None
        timeout = self._next_timeout()
        if cap is not None:
            timeout = cap if timeout is None else min(timeout, cap)
        for key, mask in self._sel.select(timeout):
            if isinstance(key.data, Acceptor):
                key.data.accept_some()
            elif key.data is _WAKE:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            else:
                call: _Call = key.data
                if mask & selectors.EVENT_WRITE:
                    self._write(call)
                elif mask & selectors.EVENT_READ:
                    self._readable(call)
        self._handle_events()
        self._fire_timers()
        if self._acceptor is not None:
            self._acceptor.maybe_resume()
        if self._idle.seconds > 0 and not self._calls:
            self._leave_if_idle()

    def _leave_if_idle(self) -> None:
        """No call for --idle-exit seconds: take the socket away, serve who already connected.

        A caller that found the socket file just before it went may still be connecting: the
        listener stays open for RETIRE_GRACE after the unlink, so no connection is reset.
        """
        now = time.monotonic()
        if not self._retiring:
            due = self._idle.due_in(now)
            if due is None or due > 0 or self._stopping.is_set():
                return
            log.info("no call for %gs: exiting (--idle-exit)", self._idle.seconds)
            self._retiring = True
            self._retire_at = now + RETIRE_GRACE
            self._unlink_socket()  # new callers run plugins themselves (or start a daemon)
        if self._acceptor is not None:
            self._acceptor.accept_some()  # those already in the backlog are still served
        if not self._calls and now >= self._retire_at:
            self.stop()

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        while self._timers and self._timers[0][2] != self._timers[0][3].timer_gen:
            heapq.heappop(self._timers)
        candidates = []
        if self._timers:
            candidates.append(self._timers[0][0] - now)
        if self._acceptor is not None and self._acceptor.resume_at is not None:
            candidates.append(self._acceptor.resume_at - now)
        if not self._calls:
            idle = self._retire_at - now if self._retiring else self._idle.due_in(now)
            if idle is not None:
                candidates.append(idle)
        return max(0.0, min(candidates)) if candidates else None

    def _set_timer(self, call: _Call, when: float) -> None:
        call.timer_gen += 1
        heapq.heappush(self._timers, (when, next(self._seq), call.timer_gen, call))

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _when, _seq, gen, call = heapq.heappop(self._timers)
            if gen == call.timer_gen and call in self._calls:
                call.timer_gen += 1
                self._on_timer(call, now)

    # ---- admitted connections ------------------------------------------------------

    def _admit(self, sock: socket.socket, accepted: int) -> None:
        """A caller the acceptor checked: start reading its request (deadline: recv_timeout)."""
        call = _Call(sock, accepted, time.monotonic() + self.recv_timeout, new_record("call"))
        self._calls.add(call)
        self._open_socks += 1
        assert self._sel is not None
        self._sel.register(sock, selectors.EVENT_READ, call)
        self._set_timer(call, call.deadline)

    # ---- receiving -----------------------------------------------------------------------

    def _readable(self, call: _Call) -> None:
        assert call.sock is not None
        if call.phase is Phase.RECEIVING:
            try:
                req = call.reader.feed(call.sock)
            except CNIError as err:
                call.record.kind = "bad-request"
                call.record.note = str(err)
                self._reply(call, protocol.error_reply(err))
                return
            except OSError as exc:
                call.record.kind = "bad-request"
                call.record.exit_code = 1
                call.record.note = f"client gone while sending: {exc}"
                self._close(call)
                return
            if req is not None:
                call.record.recv = ms(call.accepted_ns, time.perf_counter_ns())
                self._dispatch(call, req)
            return
        hung_up = peer_hung_up(call.sock)
        if hung_up is None:
            return
        self._unmonitor(call)
        if hung_up:
            self._caller_gone(call)

    def _unmonitor(self, call: _Call) -> None:
        if call.monitored and call.sock is not None and self._sel is not None:
            self._sel.unregister(call.sock)
        call.monitored = False

    def _dispatch(self, call: _Call, req: Request) -> None:
        call.request = req
        if req.kind == protocol.KIND_PING:
            call.record.kind = "ping"
            self._reply(call, Reply(0, _json(self.health()), b"", req.kind))
            return
        if req.kind == protocol.KIND_STATS:
            call.record.kind = "stats"
            self._reply(call, Reply(0, _json(self.stats()), b"", req.kind))
            return
        rec = call.record
        rec.plugin_type = req.plugin_type
        rec.command = req.env.get("CNI_COMMAND", "")
        rec.container_id = req.env.get("CNI_CONTAINERID", "")
        if req.caller_netns_fd is None:
            rec.note = "refused: no caller netns fd"
            self._reply(call, policy.missing_caller_netns())
            return
        refusal = policy.unavailable(self.plugins, req.plugin_type)
        if refusal is not None:
            self._reply(call, refusal)
            return
        key = rec.container_id if rec.container_id and rec.command != "VERSION" else None
        admission = self._lanes.admit(key, call)
        if admission in (Admission.CONTAINER_FULL, Admission.TOTAL_FULL):
            self._stats.bump("busy")
            where = (
                f"{self._lanes.max_per_container} for container {rec.container_id[:12]}"
                if admission is Admission.CONTAINER_FULL
                else f"{self._lanes.max_total} in total"
            )
            rec.note = f"busy: queue full ({where})"
            err = CNIError(
                TRY_AGAIN_LATER, f"pycni daemon is busy: queue full ({where})", "try again later"
            )
            self._reply(call, protocol.error_reply(err))
            return
        call.key = key
        call.admitted = True
        call.ready_ns = time.perf_counter_ns()
        call.deadline = time.monotonic() + self.call_timeout
        self._set_timer(call, call.deadline)
        if admission is Admission.RUN:
            call.holds_lane = True
            self._submit(call)
        else:
            call.phase = Phase.WAITING

    # ---- running -------------------------------------------------------------------------

    def _submit(self, call: _Call) -> None:
        call.phase = Phase.SUBMITTED
        self._pool.submit(lambda: self._work(call))

    def _post(self, kind: str, call: _Call) -> None:
        self._events.put((kind, call))
        self._wake()

    def _work(self, call: _Call) -> None:
        """On a worker thread: run the call (or skip it), undo an ADD nobody will receive."""
        with call.lock:
            if call.cancel.is_set():
                call.skipped = True
            else:
                call.started = True
        if call.skipped:
            self._post("done", call)
            return
        req = call.request
        assert req is not None
        start = time.perf_counter_ns()
        call.record.queue = ms(call.ready_ns, start)
        control = CallControl(self.call_timeout, call.cancel, call.deadline)
        reply = policy.execute(self._runner, req, control, self._pool.home_fd)
        call.record.run = ms(start, time.perf_counter_ns())
        with call.lock:
            call.returned = True
            call.result = reply
            undeliverable = call.gone or call.abandoned
            abandoned = call.abandoned
        if undeliverable and _is_successful_add(req, reply):
            self._undo(call, req, reply)
            call.undone = True
        if abandoned:
            self._pool.give_back()
        self._post("done", call)

    def _undo(self, call: _Call, req: Request, reply: Reply) -> None:
        """The ADD's result reaches nobody, so the runtime will not DEL it: DEL it now."""
        undo = policy.undo_request(req, reply)
        control = CallControl.start(self.call_timeout)
        result = policy.execute(self._runner, undo, control, self._pool.home_fd)
        outcome = "rolled back" if result.exit_code == 0 else "rollback DEL failed"
        if result.exit_code == 0:
            self._stats.bump("rolled_back")
        call.record.add_note(outcome)
        log.warning(
            "%s %s ADD: its caller never got the result, %s",
            req.env.get("CNI_CONTAINERID", "-")[:12],
            req.plugin_type,
            outcome,
        )

    def _handle_events(self) -> None:
        while True:
            try:
                kind, call = self._events.get_nowait()
            except queue.Empty:
                break
            if kind == "done":
                self._worker_done(call)
            elif kind == "undone":
                self._finish_call(call)
        self._pool.maintain()  # replace retired workers (spawned here, on the main thread)

    def _worker_done(self, call: _Call) -> None:
        call.phase = Phase.DONE
        if call.skipped:
            call.record.add_note("not run")
        if call.writer is not None:
            return  # our earlier answer is still being written; its end finishes the call
        if call.skipped or call.answered or call.gone or call.sock is None:
            if not call.skipped and not call.undone and self._undo_late_add(call):
                return  # "undone" finishes it
            self._finish_call(call)
            return
        reply = call.result
        assert reply is not None and call.request is not None
        if call.timed_out and reply.exit_code != 0:
            reply = policy.deadline_error(self.call_timeout, True, reply)
            call.record.add_note("deadline passed; cancelled")
        call.undo_if_undelivered = _is_successful_add(call.request, reply)
        self._reply(call, reply)

    def _undo_late_add(self, call: _Call) -> bool:
        """The caller left just as its ADD returned successfully: nobody will DEL it."""
        req, result = call.request, call.result
        if req is None or result is None or not _is_successful_add(req, result):
            return False
        self._pool.submit(lambda: self._undo_job(call, req, result))
        return True

    # ---- deadlines and callers that leave ------------------------------------------------

    def _on_timer(self, call: _Call, now: float) -> None:
        if call.writer is not None:  # the reply was not taken in time
            self._reply_failed(call, "reply not taken before the send deadline")
            return
        if call.phase is Phase.RECEIVING:
            call.record.kind = "bad-request"
            err = protocol.malformed(
                f"incomplete request after {self.recv_timeout:g} s "
                f"({call.reader.received} bytes received)"
            )
            call.record.note = str(err)
            self._reply(call, protocol.error_reply(err))
            return
        if call.phase is Phase.WAITING:
            assert call.key is not None
            self._lanes.drop(call.key, call)
            call.admitted = False
            call.phase = Phase.DONE
            self._time_out(call, started=False)
            if call.sock is None:
                self._finish_call(call)
            return
        if call.phase is not Phase.SUBMITTED or call.answered:
            return
        with call.lock:
            started = call.started
            returned = call.returned
            if not started:
                call.cancel.set()  # the worker will skip it
            elif not call.timed_out:
                call.timed_out = True
                call.cancel.set()  # exec'd delegates are killed; the plugin rolls back
            elif not returned:
                call.abandoned = True
        if not started:
            self._time_out(call, started=False)
        elif call.abandoned:
            self._time_out(call, started=True)
            if not self._pool.borrow():
                log.error("too many calls overran their deadline and still hold workers")
        elif not returned:
            self._set_timer(call, now + self.cancel_grace)

    def _time_out(self, call: _Call, *, started: bool) -> None:
        self._stats.bump("timed_out")
        call.record.add_note(f"deadline of {self.call_timeout:g}s passed")
        log.warning(
            "%s %s %s: deadline of %gs passed %s",
            call.record.container_id[:12] or "-",
            call.record.plugin_type,
            call.record.command or "-",
            self.call_timeout,
            "while running; cancelled" if started else "before it could start",
        )
        call.answered = True
        if call.sock is not None:
            self._reply(call, policy.deadline_error(self.call_timeout, started, None))

    def _caller_gone(self, call: _Call) -> None:
        call.record.add_note("caller gone")
        if call.phase is Phase.WAITING:
            assert call.key is not None
            self._lanes.drop(call.key, call)
            call.admitted = False
            self._stats.bump("dropped")
            call.record.add_note("dropped")
            self._close_sock(call)
            self._finish_call(call)
            return
        with call.lock:
            call.gone = True
            call.cancel.set()
            started = call.started
        if not started:
            self._stats.bump("dropped")
        self._close_sock(call)

    # ---- replying and finishing ----------------------------------------------------------

    def _reply(self, call: _Call, reply: Reply) -> None:
        if call.sock is None:
            return
        if call.writer is None:  # the worker's result (or our error) goes out once
            call.record.exit_code = reply.exit_code
            if reply.exit_code != 0:
                call.record.error_code = error_code(reply.stdout)
        call.writer = ReplyWriter(reply)
        call.send_deadline = time.monotonic() + self.send_timeout
        self._set_timer(call, call.send_deadline)
        self._write(call)

    def _write(self, call: _Call) -> None:
        assert call.writer is not None and call.sock is not None and self._sel is not None
        start = time.perf_counter_ns()
        try:
            done = call.writer.write(call.sock)
        except OSError as exc:
            self._reply_failed(call, f"client gone before the reply: {exc}")
            return
        call.record.send += ms(start, time.perf_counter_ns())
        if not done:
            events = selectors.EVENT_WRITE
            if call.monitored:
                self._sel.modify(call.sock, events, call)
            else:
                self._sel.register(call.sock, events, call)
                call.monitored = True
            return
        call.writer = None
        call.undo_if_undelivered = False
        self._close_sock(call)
        if call.phase is not Phase.SUBMITTED:  # else the worker's return finishes it
            self._finish_call(call)

    def _reply_failed(self, call: _Call, why: str) -> None:
        call.writer = None
        call.record.add_note(why)
        self._close_sock(call)
        req = call.request
        if call.undo_if_undelivered and req is not None and call.result is not None:
            call.undo_if_undelivered = False
            result = call.result
            self._pool.submit(lambda: self._undo_job(call, req, result))
            return
        if call.phase is not Phase.SUBMITTED:
            self._finish_call(call)

    def _undo_job(self, call: _Call, req: Request, reply: Reply) -> None:
        try:
            self._undo(call, req, reply)
        finally:
            self._post("undone", call)

    def _close_sock(self, call: _Call) -> None:
        if call.sock is None:
            return
        if call.monitored and self._sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(call.sock)
        call.monitored = False
        call.sock.close()
        call.sock = None
        self._open_socks -= 1
        call.reader.close()

    def _close(self, call: _Call) -> None:
        self._close_sock(call)
        self._finish_call(call)

    def _finish_call(self, call: _Call) -> None:
        """The connection's work is over: release its lane, fds and record it."""
        if call not in self._calls:
            return
        if call.sock is not None:
            self._close_sock(call)
        self._calls.discard(call)
        call.timer_gen += 1
        if call.admitted:
            call.admitted = False
            if call.holds_lane:
                following = self._lanes.finish(call.key)
                if following is not None:
                    following.holds_lane = True
                    self._submit(following)
            elif call.key is not None:
                self._lanes.drop(call.key, call)
        req = call.request
        if req is not None:
            for fd in (req.caller_netns_fd, req.target_netns_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            req.caller_netns_fd = req.target_netns_fd = None
        call.request = call.result = None  # stale timer entries may keep the call a while
        call.writer = None
        if len(self._timers) > 1024 and len(self._timers) > 4 * len(self._calls):
            self._timers = [t for t in self._timers if t[2] == t[3].timer_gen]
            heapq.heapify(self._timers)
        rec = call.record
        rec.total = ms(call.accepted_ns, time.perf_counter_ns())
        self._stats.record(rec)
        if rec.kind == "call":
            self._idle.touch()
        if rec.kind == "call" and rec.plugin_type:
            log.info(
                "%s %s %s exit=%d recv=%.2fms queue=%.2fms run=%.2fms send=%.2fms%s",
                rec.container_id[:12] or "-",
                rec.plugin_type,
                rec.command or "-",
                rec.exit_code,
                rec.recv,
                rec.queue,
                rec.run,
                rec.send,
                f" ({rec.note})" if rec.note else "",
            )

    # ---- health and stats ----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok" if not self._stopping.is_set() else "draining",
            "pid": os.getpid(),
            "protocolVersion": protocol.VERSION,
            "uptimeSeconds": round(time.time() - self.started, 3),
            "inFlight": len(self._calls),
            "workers": self._pool.workers,
            "socketActivated": self._from_systemd,
            "startedBy": self.started_by(),
            "idleExitSeconds": self._idle.seconds,
            "limits": {
                "recvTimeoutSeconds": self.recv_timeout,
                "callTimeoutSeconds": self.call_timeout,
                "sendTimeoutSeconds": self.send_timeout,
                "maxPerContainer": self._lanes.max_per_container,
                "maxQueued": self._lanes.max_total,
                "maxConnections": self.max_connections,
            },
            "plugins": self.plugins,
        }

    def observe(self, observer: Callable[[CallRecord], None]) -> None:
        """Call ``observer`` with every recorded request (on the main thread): metrics.py."""
        self._stats.observer = observer

    def load(self) -> dict[str, Any]:
        """Counters and gauges, safe to read from another thread (may raise RuntimeError)."""
        counts = self._stats.counts()
        counts["retired_workers"] = self._pool.retired
        return {
            "in_flight": len(self._calls),
            "queued": self._lanes.waiting() + self._pool.pending(),
            "workers": self._pool.workers,
            "counts": counts,
        }

    def started_by(self) -> str:
        return autostart.how_started(self._autostarted, self._from_systemd)

    def stats(self, recent: int = 20) -> dict[str, Any]:
        snap = self._stats.snapshot(recent)
        snap["counts"]["retired_workers"] = self._pool.retired
        return {
            "pid": os.getpid(),
            "uptimeSeconds": round(time.time() - self.started, 3),
            "inFlight": len(self._calls),
            "queued": self._lanes.waiting(),
            **snap,
        }


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _is_successful_add(req: Request, reply: Reply) -> bool:
    return reply.exit_code == 0 and req.env.get("CNI_COMMAND") == "ADD"
