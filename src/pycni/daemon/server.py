"""The warm daemon: runs plugin calls forwarded by the entry points, with every plugin imported.

This module is the wiring: lifecycle, the one selector loop of the main thread, idle exit,
health and stats. The main thread owns every socket: it accepts and checks callers
(acceptor.py, peer.py) and drives the calls in flight (calls.py) and their deadlines
(deadlines.py); worker threads in the daemon's home netns (pool.py) run them and write
their replies (worker.py).
What a call does is policy.py; the counters are stats.py; the socket is listener.py.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from pycni.daemon import autostart, policy, protocol
from pycni.daemon import timeouts as deadlines
from pycni.daemon.acceptor import Acceptor, connection_limit
from pycni.daemon.call import Call
from pycni.daemon.call_table import CallTable
from pycni.daemon.lanes import Lanes
from pycni.daemon.listener import Listener
from pycni.daemon.policy import Runner
from pycni.daemon.pool import WorkerPool
from pycni.daemon.request_io import Waker
from pycni.daemon.stats import CallRecord, Stats

log = logging.getLogger("pycni.daemon")

# Defaults, documented in docs/daemon.md and docs/security.md.
RECV_TIMEOUT = 10.0  # a whole request must arrive within this (total, not per read)
CALL_TIMEOUT = 120.0  # kubelet's runtime-request-timeout: no CRI caller waits longer
SEND_TIMEOUT = 10.0  # a reply must be taken within this
CANCEL_GRACE = 2.0  # after the deadline, time for a cancelled plugin to roll back
MAX_PER_CONTAINER = 8  # admitted calls (running + waiting) for one CNI_CONTAINERID
MAX_QUEUED = 256  # admitted calls in total
RETIRE_GRACE = 0.2  # --idle-exit: seconds the listener stays open after its file is removed


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
        self._listener = Listener(socket_path)
        self._idle = autostart.IdleClock(idle_exit)  # 0: never leave when idle
        self._retiring = False
        self._retire_at = 0.0
        self._autostarted = autostarted
        self.recv_timeout = recv_timeout
        self.call_timeout = call_timeout
        self.send_timeout = send_timeout
        self.cancel_grace = cancel_grace
        self.drain_timeout = drain_timeout
        self._stats = Stats(keep_records)
        self._waker = Waker()
        self._pool = WorkerPool(workers, max_extra=workers, wake=self._waker.wake)
        self._stopping = threading.Event()
        self._acceptor: Acceptor | None = None
        self._sel: selectors.BaseSelector | None = None
        self._table = CallTable(
            lanes=Lanes(max_per_container, max_queued),
            pool=self._pool,
            stats=self._stats,
            runner=runner or policy.default_runner,
            idle=self._idle,
            wake=self._waker.wake,
            health=self.health,
            report=self.stats,
            recv_timeout=recv_timeout,
            call_timeout=call_timeout,
            send_timeout=send_timeout,
            cancel_grace=cancel_grace,
        )
        self.max_connections = connection_limit(workers, max_connections)
        self.started = time.time()

    @property
    def workers(self) -> int:
        return self._pool.size

    @property
    def socket_path(self) -> str:
        return self._listener.path

    @property
    def plugins(self) -> dict[str, str]:
        """The plugins it serves (type -> version), imported before it serves."""
        return self._table.plugins

    @plugins.setter
    def plugins(self, value: dict[str, str]) -> None:
        self._table.plugins = value

    # ---- lifecycle -----------------------------------------------------------------------

    def bind(self) -> None:
        """Take the socket from systemd if it passed one, else create the root-only socket."""
        self._listener.bind()

    def serve_forever(self, *, install_signals: bool = True) -> None:
        """Serve until SIGTERM/SIGINT (or ``stop()``), then drain the calls in flight."""
        if self._listener.sock is None:
            self.bind()
        if not self.plugins:
            self.plugins = policy.preload_plugins()
        # before accepting: a first call would wait for the same rebuild (docs/benchmarks.md);
        # the socket is bound, so callers queue meanwhile
        policy.warm_state(os.path.dirname(os.path.abspath(self.socket_path)))
        self._pool.maintain()
        if install_signals:
            self._install_signals()
        self._sel = self._table.sel = selectors.DefaultSelector()
        self._sel.register(self._waker.fileobj, selectors.EVENT_READ, self._waker)
        assert self._listener.sock is not None
        self._acceptor = Acceptor(
            self._listener.sock,
            self._sel,
            max_connections=self.max_connections,
            stats=self._stats,
            admit=self._table.admit,
            open_count=lambda: self._table.open_socks,
        )
        self._acceptor.resume()
        log.info(
            "pycni daemon serving on %s%s with %d workers (call deadline %gs, "
            "at most %d connections)",
            self.socket_path,
            " (from systemd)" if self._listener.from_systemd else "",
            self._pool.size,
            self.call_timeout,
            self.max_connections,
        )
        self._idle.touch()  # idle from when it can serve (importing the plugins takes a while)
        try:
            self._loop()
        finally:
            self._listener.close(self._acceptor)
            self._acceptor = None
            self._drain()
            self._sel.close()
            if install_signals:
                signal.set_wakeup_fd(-1)  # the waker may not outlive this call

    def stop(self) -> None:
        """Ask the main loop to stop (safe from any thread and from a signal handler)."""
        self._stopping.set()
        self._waker.wake()

    def _install_signals(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            log.info(
                "signal %d: no new calls, draining %d in flight", signum, len(self._table.calls)
            )
            self.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        # The kernel may deliver a signal to any thread (a worker, the metrics server): then the
        # interpreter only notes it, and its handler runs when the main thread next executes
        # bytecode, which a select() without a timer never does. The wakeup fd makes the
        # interpreter's own C handler wake that select(), whichever thread took the signal.
        signal.set_wakeup_fd(self._waker.write_fd(), warn_on_full_buffer=False)

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        while self._table.calls and time.monotonic() < deadline:
            self._step(min(0.2, max(0.0, deadline - time.monotonic())))
        if self._table.calls:
            log.warning("drain timeout: %d calls still in flight", len(self._table.calls))
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
            elif isinstance(key.data, Waker):
                key.data.drain()
            else:
                call: Call = key.data
                if mask & selectors.EVENT_WRITE:
                    self._table.write(call)
                elif mask & selectors.EVENT_READ:
                    self._table.readable(call)
        self._table.handle_events()
        now = time.monotonic()
        for call in self._table.timers.due(now, self._table.calls):
            deadlines.on_timer(self._table, call, now, self.cancel_grace)
        if self._acceptor is not None:
            self._acceptor.maybe_resume()
        if self._idle.seconds > 0 and not self._table.calls:
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
            self._listener.unlink()  # new callers run plugins themselves (or start a daemon)
        if self._acceptor is not None:
            self._acceptor.accept_some()  # those already in the backlog are still served
        if not self._table.calls and now >= self._retire_at:
            self.stop()

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        candidates = []
        timer = self._table.timers.next_at()
        if timer is not None:
            candidates.append(timer - now)
        if self._acceptor is not None and self._acceptor.resume_at is not None:
            candidates.append(self._acceptor.resume_at - now)
        if not self._table.calls:
            idle = self._retire_at - now if self._retiring else self._idle.due_in(now)
            if idle is not None:
                candidates.append(idle)
        return max(0.0, min(candidates)) if candidates else None

    # ---- health and stats ----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok" if not self._stopping.is_set() else "draining",
            "pid": os.getpid(),
            "protocolVersion": protocol.VERSION,
            "uptimeSeconds": round(time.time() - self.started, 3),
            "inFlight": len(self._table.calls),
            "workers": self._pool.workers,
            "socketActivated": self._listener.from_systemd,
            "startedBy": self.started_by(),
            "idleExitSeconds": self._idle.seconds,
            "limits": {
                "recvTimeoutSeconds": self.recv_timeout,
                "callTimeoutSeconds": self.call_timeout,
                "sendTimeoutSeconds": self.send_timeout,
                "maxPerContainer": self._table.lanes.max_per_container,
                "maxQueued": self._table.lanes.max_total,
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
            "in_flight": len(self._table.calls),
            "queued": self._table.lanes.waiting() + self._pool.pending(),
            "workers": self._pool.workers,
            "counts": counts,
        }

    def started_by(self) -> str:
        return autostart.how_started(self._autostarted, self._listener.from_systemd)

    def stats(self, recent: int = 20) -> dict[str, Any]:
        snap = self._stats.snapshot(recent)
        snap["counts"]["retired_workers"] = self._pool.retired
        return {
            "pid": os.getpid(),
            "uptimeSeconds": round(time.time() - self.started, 3),
            "inFlight": len(self._table.calls),
            "queued": self._table.lanes.waiting(),
            **snap,
        }
