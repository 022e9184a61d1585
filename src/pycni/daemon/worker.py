"""What runs on a worker thread: the call itself, its reply, and the DEL that undoes an ADD
whose result reached nobody (the runtime will never DEL it). The main thread learns of each
end through ``post`` (the daemon's event queue).

The worker writes the reply itself (one non-blocking send; what the socket does not take the
main thread finishes): the caller is answered without waiting for the main loop to wake up
and take the GIL (docs/benchmarks.md, "Where the time goes"). The socket stays the main
thread's: the worker writes only under ``call.lock`` while the caller is not known gone, and
the main thread closes a running call's socket only after marking it gone under that lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pycni.daemon import policy
from pycni.daemon.call import Call, Phase, is_successful_add
from pycni.daemon.policy import Runner
from pycni.daemon.pool import WorkerPool
from pycni.daemon.protocol import Reply, Request
from pycni.daemon.request_io import ReplyWriter
from pycni.daemon.stats import Stats, error_code, ms
from pycni.runtime.exec import CallControl

log = logging.getLogger("pycni.daemon")

Post = Callable[[str, Call], None]


class CallRunner:
    def __init__(
        self, runner: Runner, pool: WorkerPool, stats: Stats, call_timeout: float, post: Post
    ) -> None:
        self._runner = runner
        self._pool = pool
        self._stats = stats
        self._call_timeout = call_timeout
        self._post = post

    def submit(self, call: Call) -> None:
        """Main thread: hand the call to the pool (it runs when a worker is free)."""
        call.phase = Phase.SUBMITTED
        self._pool.submit(lambda: self._work(call))

    def submit_undo(self, call: Call, req: Request, reply: Reply) -> None:
        """Main thread: DEL the ADD ``req`` on a worker; posts "undone" when it is over."""
        self._pool.submit(lambda: self._undo_job(call, req, reply))

    def _work(self, call: Call) -> None:
        """Run the call (or skip it), undo an ADD nobody will receive; posts "done"."""
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
        control = CallControl(self._call_timeout, call.cancel, call.deadline)
        reply = policy.execute(self._runner, req, control, self._pool.home_fd)
        call.record.run = ms(start, time.perf_counter_ns())
        with call.lock:
            call.returned = True
            call.result = reply
            if not (call.gone or call.abandoned or call.timed_out):
                _deliver(call, req, reply)  # a timed-out call's reply is the main thread's
            undeliverable = call.gone or call.abandoned
            abandoned = call.abandoned
        if undeliverable and is_successful_add(req, reply):
            self._undo(call, req, reply)
            call.undone = True
        if abandoned:
            self._pool.give_back()
        self._post("done", call)

    def _undo(self, call: Call, req: Request, reply: Reply) -> None:
        """The ADD's result reaches nobody, so the runtime will not DEL it: DEL it now."""
        undo = policy.undo_request(req, reply)
        control = CallControl.start(self._call_timeout)
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

    def _undo_job(self, call: Call, req: Request, reply: Reply) -> None:
        try:
            self._undo(call, req, reply)
        finally:
            self._post("undone", call)


def _deliver(call: Call, req: Request, reply: Reply) -> None:
    """Worker, under ``call.lock``: send the reply; what the socket did not take is left in
    ``call.rest`` for the main thread. A send that fails marks the caller gone (an ADD is then
    undone by the caller of this, as for a caller that hung up)."""
    if call.sock is None:
        return
    rec = call.record
    rec.exit_code = reply.exit_code
    if reply.exit_code != 0:
        rec.error_code = error_code(reply.stdout)
    if not is_successful_add(req, reply):
        policy.release_netns(req)  # nothing enters the pod again for this call
    start = time.perf_counter_ns()
    writer = ReplyWriter(reply)
    try:
        done = writer.write(call.sock)
    except OSError as exc:
        call.gone = True
        call.cancel.set()
        rec.add_note(f"client gone before the reply: {exc}")
        return
    end = time.perf_counter_ns()
    rec.send = ms(start, end)
    if done:
        call.delivered = True
        call.replied_ns = end
    else:
        call.rest = writer
