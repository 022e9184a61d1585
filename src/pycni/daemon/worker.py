"""What runs on a worker thread: the call itself, and the DEL that undoes an ADD whose result
reached nobody (the runtime will never DEL it). The main thread learns of each end through
``post`` (the daemon's event queue)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pycni.daemon import policy
from pycni.daemon.call import Call, Phase, is_successful_add
from pycni.daemon.policy import Runner
from pycni.daemon.pool import WorkerPool
from pycni.daemon.protocol import Reply, Request
from pycni.daemon.stats import Stats, ms
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
