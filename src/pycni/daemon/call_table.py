"""The calls in flight, from accept to the last byte of the reply (main thread only).

A checked connection is admitted, its request read without blocking (request_io.py), ping
and stats answered at once, a call admitted into its container's lane (lanes.py) and handed
to a worker (worker.py); when the worker posts its end, the reply is written, and finishing
the call releases its lane to the next call of that container. Deadlines are deadlines.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import selectors
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from pycni.daemon import autostart, policy, protocol
from pycni.daemon.call import Call, Phase, is_successful_add
from pycni.daemon.lanes import Admission, Lanes
from pycni.daemon.pool import WorkerPool
from pycni.daemon.protocol import Reply, Request
from pycni.daemon.request_io import ReplyWriter, peer_hung_up
from pycni.daemon.stats import Stats, error_code, ms, new_record
from pycni.daemon.timer_heap import Timers
from pycni.daemon.worker import CallRunner
from pycni.spec.errors import CNIError, TryAgainLater

log = logging.getLogger("pycni.daemon")

Report = Callable[[], dict[str, Any]]


class CallTable:
    def __init__(
        self,
        *,
        lanes: Lanes[Call],
        pool: WorkerPool,
        stats: Stats,
        runner: policy.Runner,
        idle: autostart.IdleClock,
        wake: Callable[[], None],
        health: Report,
        report: Report,
        recv_timeout: float,
        call_timeout: float,
        send_timeout: float,
        cancel_grace: float = 2.0,
    ) -> None:
        self.lanes = lanes
        self.pool = pool
        self.stats = stats
        self.timers = Timers()
        self.calls: set[Call] = set()  # open connections and calls not yet finished
        self.open_socks = 0
        self.sel: selectors.BaseSelector | None = None
        self.plugins: dict[str, str] = {}
        self.recv_timeout = recv_timeout
        self.call_timeout = call_timeout
        self.send_timeout = send_timeout
        # What a HELLO's acknowledgement promises: an answer within the call's deadline plus
        # the grace a cancelled plugin gets (deadlines.py), plus a second for the reply.
        self.reply_bound_ms = int((call_timeout + cancel_grace + 1.0) * 1000)
        self._foreign_logged: set[int] = set()
        self._idle = idle
        self._wake = wake
        self._health = health
        self._report = report
        self._events: queue.SimpleQueue[tuple[str, Call]] = queue.SimpleQueue()
        self.runner = CallRunner(runner, pool, stats, call_timeout, self._post)

    # ---- admitted connections and their requests -----------------------------------------

    def admit(self, sock: socket.socket, accepted: int) -> None:
        """A caller the acceptor checked: start reading its request (deadline: recv_timeout)."""
        call = Call(sock, accepted, time.monotonic() + self.recv_timeout, new_record("call"))
        self.calls.add(call)
        self.open_socks += 1
        assert self.sel is not None
        self.sel.register(sock, selectors.EVENT_READ, call)
        self.timers.set(call, call.deadline)
        # The entry point sends its HELLO right after connect(), so by the time a connection
        # is accepted it is usually waiting: read (and acknowledge) it now instead of after
        # another turn of the main loop (a non-blocking read; nothing there is fine).
        self.readable(call)

    def readable(self, call: Call) -> None:
        assert call.sock is not None
        if call.phase is Phase.RECEIVING:
            try:
                req = call.reader.feed(call.sock)
            except protocol.ForeignVersion as err:
                self._foreign_version(call, err)
                return
            except CNIError as err:
                call.record.kind = "bad-request"
                call.record.note = str(err)
                self.reply(call, protocol.error_reply(err))
                return
            except OSError as exc:
                call.record.kind = "bad-request"
                call.record.exit_code = 1
                call.record.note = f"client gone while sending: {exc}"
                self.close_sock(call)
                self.finish(call)
                return
            if req is not None:
                call.record.recv = ms(call.accepted_ns, time.perf_counter_ns())
                self._dispatch(call, req)
            return
        hung_up = peer_hung_up(call.sock)
        if hung_up is None:
            return
        if call.monitored and self.sel is not None:
            self.sel.unregister(call.sock)
        call.monitored = False
        if hung_up:
            self._caller_gone(call)

    def _foreign_version(self, call: Call, err: protocol.ForeignVersion) -> None:
        """An entry point of another protocol version: it runs the plugin itself (once per
        version in the log: every call of such an entry point comes here until reinstalled)."""
        call.record.kind = "run-locally"
        call.record.note = f"protocol version {err.version}"
        if err.version not in self._foreign_logged and len(self._foreign_logged) < 16:
            self._foreign_logged.add(err.version)
            log.warning(
                "an entry point speaks protocol version %d (this daemon speaks %d): its calls "
                "run in-process; reinstall the entry points (`pycni plugins install DIR`) to "
                "use the daemon (logged once)",
                err.version,
                protocol.VERSION,
            )
        self.reply(call, protocol.foreign_version_reply(err))

    def _hello(self, call: Call) -> None:
        """Acknowledge a HELLO: the entry point sends its call only after this arrived, so one
        that gave up waiting sent nothing and may run the plugin itself."""
        assert call.sock is not None
        if call.hello_done:
            call.record.kind = "bad-request"
            self.reply(call, protocol.error_reply(protocol.malformed("a second HELLO")))
            return
        call.hello_done = True
        try:
            done = ReplyWriter(protocol.ack_reply(self.reply_bound_ms)).write(call.sock)
        except OSError:
            done = False
        if not done:  # 20 bytes into a fresh socket's buffer: only a vanished caller fails
            call.record.kind = "bad-request"
            call.record.note = "caller gone before the acknowledgement"
            self.close_sock(call)
            self.finish(call)

    def _dispatch(self, call: Call, req: Request) -> None:
        if req.kind == protocol.KIND_HELLO:
            self._hello(call)
            return
        call.request = req
        if req.kind == protocol.KIND_PING:
            call.record.kind = "ping"
            self.reply(call, Reply(0, _json(self._health()), b"", req.kind))
            return
        if req.kind == protocol.KIND_STATS:
            call.record.kind = "stats"
            self.reply(call, Reply(0, _json(self._report()), b"", req.kind))
            return
        rec = call.record
        rec.plugin_type = req.plugin_type
        rec.command = req.env.get("CNI_COMMAND", "")
        rec.container_id = req.env.get("CNI_CONTAINERID", "")
        rec.traceparent = req.env.get("TRACEPARENT", "")[:64]  # a valid one is 55 characters
        rec.tracestate = req.env.get("TRACESTATE", "")[:512]
        if req.caller_netns_fd is None:
            rec.note = "refused: no caller netns fd"
            self.reply(call, policy.missing_caller_netns())
            return
        refusal = policy.unavailable(self.plugins, req.plugin_type)
        if refusal is not None:
            self.reply(call, refusal)
            return
        key = rec.container_id if rec.container_id and rec.command != "VERSION" else None
        admission = self.lanes.admit(key, call)
        if admission in (Admission.CONTAINER_FULL, Admission.TOTAL_FULL):
            self.stats.bump("busy")
            where = (
                f"{self.lanes.max_per_container} for container {rec.container_id[:12]}"
                if admission is Admission.CONTAINER_FULL
                else f"{self.lanes.max_total} in total"
            )
            rec.note = f"busy: queue full ({where})"
            err = TryAgainLater(f"pycni daemon is busy: queue full ({where})", "try again later")
            self.reply(call, protocol.error_reply(err))
            return
        call.key = key
        call.admitted = True
        call.ready_ns = time.perf_counter_ns()
        call.deadline = time.monotonic() + self.call_timeout
        self.timers.set(call, call.deadline)
        if admission is Admission.RUN:
            call.holds_lane = True
            self.runner.submit(call)
        else:
            call.phase = Phase.WAITING

    def _caller_gone(self, call: Call) -> None:
        if call.phase is Phase.WAITING:
            call.record.add_note("caller gone")
            assert call.key is not None
            self.lanes.drop(call.key, call)
            call.admitted = False
            self.stats.bump("dropped")
            call.record.add_note("dropped")
            self.close_sock(call)
            self.finish(call)
            return
        with call.lock:
            delivered = call.delivered
            if not delivered:  # the worker writes a reply only while this is unset
                call.gone = True
                call.cancel.set()
                call.record.add_note("caller gone")
            started = call.started
        if not started:
            self.stats.bump("dropped")
        self.close_sock(call)  # after ``gone`` is set: the worker no longer writes to it

    # ---- what the workers post -----------------------------------------------------------

    def _post(self, kind: str, call: Call) -> None:
        """Any thread: tell the main loop that a job of ``call`` ended."""
        self._events.put((kind, call))
        self._wake()

    def handle_events(self) -> None:
        while True:
            try:
                kind, call = self._events.get_nowait()
            except queue.Empty:
                break
            if kind == "done":
                self._worker_done(call)
            elif kind == "undone":
                self.finish(call)
        self.pool.maintain()  # replace retired workers (spawned here, on the main thread)

    def _worker_done(self, call: Call) -> None:
        call.phase = Phase.DONE
        if call.skipped:
            call.record.add_note("not run")
        if call.writer is not None:
            return  # our earlier answer is still being written; its end finishes the call
        if call.delivered:  # the worker sent the whole reply (worker.py)
            self.finish(call)
            return
        if call.rest is not None and not call.gone:
            self._write_rest(call)
            return
        call.rest = None
        if call.skipped or call.answered or call.gone or call.sock is None:
            if not call.skipped and not call.undone and self._undo_late_add(call):
                return  # "undone" finishes it
            self.finish(call)
            return
        reply = call.result
        assert reply is not None and call.request is not None
        if call.timed_out and reply.exit_code != 0:
            reply = policy.deadline_error(self.call_timeout, True, reply)
            call.record.add_note("deadline passed; cancelled")
        call.undo_if_undelivered = is_successful_add(call.request, reply)
        if not call.undo_if_undelivered:
            # nothing will enter the pod again for this call: let go of it before the caller
            # has the answer (an ADD's undo, should its reply not arrive, still needs them)
            policy.release_netns(call.request)
        self.reply(call, reply)

    def _write_rest(self, call: Call) -> None:
        """The worker's send did not take the whole reply: write the rest here."""
        assert call.rest is not None and call.request is not None and call.result is not None
        call.writer, call.rest = call.rest, None
        call.undo_if_undelivered = is_successful_add(call.request, call.result)
        call.send_deadline = time.monotonic() + self.send_timeout
        self.timers.set(call, call.send_deadline)
        self.write(call)

    def _undo_late_add(self, call: Call) -> bool:
        """The caller left just as its ADD returned successfully: nobody will DEL it."""
        req, result = call.request, call.result
        if req is None or result is None or not is_successful_add(req, result):
            return False
        self.runner.submit_undo(call, req, result)
        return True

    # ---- replying and finishing ----------------------------------------------------------

    def reply(self, call: Call, reply: Reply) -> None:
        if call.sock is None:
            return
        if call.writer is None:  # the worker's result (or our error) goes out once
            call.record.exit_code = reply.exit_code
            if reply.exit_code != 0:
                call.record.error_code = error_code(reply.stdout)
        call.writer = ReplyWriter(reply)
        call.send_deadline = time.monotonic() + self.send_timeout
        self.timers.set(call, call.send_deadline)
        self.write(call)

    def write(self, call: Call) -> None:
        assert call.writer is not None and call.sock is not None and self.sel is not None
        start = time.perf_counter_ns()
        try:
            done = call.writer.write(call.sock)
        except OSError as exc:
            self.reply_failed(call, f"client gone before the reply: {exc}")
            return
        end = time.perf_counter_ns()
        call.record.send += ms(start, end)
        if not done:
            events = selectors.EVENT_WRITE
            if call.monitored:
                self.sel.modify(call.sock, events, call)
            else:
                self.sel.register(call.sock, events, call)
                call.monitored = True
            return
        call.writer = None
        call.replied_ns = end
        call.undo_if_undelivered = False
        self.close_sock(call)
        if call.phase is not Phase.SUBMITTED:  # else the worker's return finishes it
            self.finish(call)

    def reply_failed(self, call: Call, why: str) -> None:
        call.writer = None
        call.record.add_note(why)
        self.close_sock(call)
        req = call.request
        if call.undo_if_undelivered and req is not None and call.result is not None:
            call.undo_if_undelivered = False
            self.runner.submit_undo(call, req, call.result)
            return
        if call.phase is not Phase.SUBMITTED:
            self.finish(call)

    def close_sock(self, call: Call) -> None:
        if call.sock is None:
            return
        if call.monitored and self.sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(call.sock)
        call.monitored = False
        call.sock.close()
        call.sock = None
        self.open_socks -= 1
        call.reader.close()

    def finish(self, call: Call) -> None:
        """The connection's work is over: release its lane, fds and record it."""
        if call not in self.calls:
            return
        if call.sock is not None:
            self.close_sock(call)
        self.calls.discard(call)
        self.timers.cancel(call)
        if call.admitted:
            call.admitted = False
            if call.holds_lane:
                following = self.lanes.finish(call.key)
                if following is not None:
                    following.holds_lane = True
                    self.runner.submit(following)
            elif call.key is not None:
                self.lanes.drop(call.key, call)
        if call.request is not None:
            policy.release_netns(call.request)
        call.request = call.result = None  # stale timer entries may keep the call a while
        call.writer = None
        self.timers.compact(len(self.calls))
        rec = call.record
        rec.total = ms(call.accepted_ns, call.replied_ns or time.perf_counter_ns())
        self.stats.record(rec)
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


def _json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()
