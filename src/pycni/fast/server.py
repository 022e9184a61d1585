"""The warm daemon: runs plugin calls forwarded by the entry points, with every plugin imported.

One connection carries one call (see protocol.py). The main thread accepts and checks the
peer is root; a fixed pool of worker threads receives requests, runs them and replies.
Calls for different containers run in parallel; calls for the same CNI_CONTAINERID run in
arrival order (a lane per container). A worker enters the caller's network namespace for the
duration of a call, so host-side work lands where an exec'd plugin would have put it, and
checks it got back home afterwards; a worker that cannot get back retires and is replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import queue
import selectors
import signal
import socket
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pycni.fast import protocol
from pycni.fast.protocol import Reply, Request
from pycni.net import ns as netns
from pycni.spec.errors import (
    INTERNAL,
    INVALID_NETNS,
    IO_FAILURE,
    PLUGIN_NOT_AVAILABLE,
    CNIError,
)

log = logging.getLogger("pycni.daemon")

_UCRED = struct.Struct("3i")
_PHASES = ("recv", "queue", "run", "send", "total")


class Outcome(Protocol):
    stdout: bytes
    stderr: bytes
    exit_code: int


Runner = Callable[..., Outcome]


def _default_runner(
    plugin_type: str, env: Mapping[str, str], stdin: bytes, *, netns_fd: int | None
) -> Outcome:
    from pycni.plugin import skel

    return skel.run(plugin_type, env, stdin, netns_fd=netns_fd)


def preload_plugins() -> dict[str, str]:
    """Import every available plugin module once; returns {type: "ok" | why it is unusable}."""
    from pycni.plugin import registry

    available = set(registry.names())
    state: dict[str, str] = {}
    for name in registry.PLUGIN_TYPES:
        if name not in available:
            state[name] = "not in this installation"
            continue
        try:
            registry.load(name)
            state[name] = "ok"
        except Exception as exc:  # a broken plugin must not keep the others from being served
            state[name] = f"failed to load: {type(exc).__name__}: {exc}"
            log.warning("plugin %s %s", name, state[name])
    return state


@dataclass
class CallRecord:
    """Timings of one served request, in milliseconds."""

    at: float
    kind: str
    plugin_type: str = ""
    command: str = ""
    container_id: str = ""
    exit_code: int = 0
    recv: float = 0.0
    queue: float = 0.0
    run: float = 0.0
    send: float = 0.0
    total: float = 0.0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class _Call:
    conn: socket.socket
    accepted_ns: int
    peer_uid: int
    request: Request | None = None
    record: CallRecord = field(default_factory=lambda: CallRecord(time.time(), "call"))
    ready_ns: int = 0


def _ms(start_ns: int, end_ns: int) -> float:
    return (end_ns - start_ns) / 1e6


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))
    return round(sorted_values[index], 3)


class _RetireWorker(Exception):
    """Raised on a worker that could not get back to the daemon's network namespace."""


class Daemon:
    def __init__(
        self,
        socket_path: str = protocol.DEFAULT_SOCKET,
        *,
        workers: int = 16,
        recv_timeout: float = 10.0,
        drain_timeout: float = 120.0,
        keep_records: int = 1000,
        runner: Runner | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.workers = workers
        self.recv_timeout = recv_timeout
        self.drain_timeout = drain_timeout
        self._runner: Runner = runner or _default_runner
        self._records: deque[CallRecord] = deque(maxlen=keep_records)
        self._counts = dict.fromkeys(
            ("requests", "calls", "errors", "bad_requests", "refused", "retired_workers"), 0
        )
        self._lock = threading.Lock()
        self._lanes: dict[str, deque[_Call]] = {}
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._listener: socket.socket | None = None
        self._listener_ino: tuple[int, int] | None = None
        self._home_fd = os.open(netns.THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
        home = os.fstat(self._home_fd)
        self._home = (home.st_dev, home.st_ino)
        self.started = time.time()
        self.plugins: dict[str, str] = {}

    # ---- lifecycle -----------------------------------------------------------------------

    def bind(self) -> None:
        """Create the root-only socket (dir 0700 when we create it, socket 0600)."""
        path = self.socket_path
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700)
        if os.path.lexists(path):
            st = os.lstat(path)
            if not stat.S_ISSOCK(st.st_mode):
                raise RuntimeError(f"{path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale: left by a daemon that did not exit cleanly
            else:
                raise RuntimeError(f"another pycni daemon is serving on {path}")
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        listener.listen(512)
        listener.setblocking(False)
        st = os.stat(path)
        self._listener_ino = (st.st_dev, st.st_ino)
        self._listener = listener

    def start_workers(self) -> None:
        for _ in range(self.workers):
            self._spawn_worker()

    def serve_forever(self, *, install_signals: bool = True) -> None:
        """Accept until SIGTERM/SIGINT (or ``stop()``), then drain in-flight calls."""
        if self._listener is None:
            self.bind()
        if not self.plugins:
            self.plugins = preload_plugins()
        self.start_workers()
        if install_signals:
            self._install_signals()
        assert self._listener is not None
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        log.info("pycni daemon serving on %s with %d workers", self.socket_path, self.workers)
        try:
            while not self._stopping.is_set():
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        self._wake_r.recv(64)
                    else:
                        self._accept()
        finally:
            sel.close()
            self._close_listener()
            self._drain()

    def stop(self) -> None:
        """Ask the accept loop to stop (safe from any thread and from a signal handler)."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _install_signals(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %d: no new calls, draining %d in flight", signum, self._in_flight)
            self.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _close_listener(self) -> None:
        if self._listener is None:
            return
        self._listener.close()
        self._listener = None
        with contextlib.suppress(OSError):
            st = os.stat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._listener_ino:
                os.unlink(self.socket_path)

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        with self._idle:
            while self._in_flight and time.monotonic() < deadline:
                self._idle.wait(timeout=0.2)
            left = self._in_flight
        if left:
            log.warning("drain timeout: %d calls still in flight", left)
        for _ in self._threads:
            self._jobs.put(None)
        for thread in list(self._threads):
            thread.join(timeout=1.0)
        log.info("pycni daemon stopped")

    # ---- workers -------------------------------------------------------------------------

    def _spawn_worker(self) -> None:
        thread = threading.Thread(target=self._worker, name="pycni-worker", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _worker(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            except _RetireWorker:
                with self._lock:
                    self._counts["retired_workers"] += 1
                    self._threads.remove(threading.current_thread())
                log.error("worker could not return to the daemon's netns; replacing it")
                self._spawn_worker()
                return
            except Exception:
                log.exception("unexpected error in a worker")

    def _ensure_home(self) -> None:
        """Verify this thread is back in the daemon's namespace, or retire it."""
        try:
            st = os.stat(netns.THREAD_NETNS)
            if (st.st_dev, st.st_ino) == self._home:
                return
            netns.setns(self._home_fd)
            st = os.stat(netns.THREAD_NETNS)
            if (st.st_dev, st.st_ino) == self._home:
                return
        except OSError:
            pass
        raise _RetireWorker

    # ---- one call ------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # BlockingIOError: nothing left in the backlog
                return
            self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        accepted = time.perf_counter_ns()
        try:
            _pid, uid, _gid = _UCRED.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            )
        except OSError:
            uid = -1
        call = _Call(conn, accepted, uid)
        with self._lock:
            self._in_flight += 1
        self._jobs.put(lambda: self._receive(call))

    def _finish(self, call: _Call) -> None:
        for fd in (
            (call.request.caller_netns_fd, call.request.target_netns_fd) if call.request else ()
        ):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        call.conn.close()
        rec = call.record
        rec.total = _ms(call.accepted_ns, time.perf_counter_ns())
        with self._idle:
            self._records.append(rec)
            self._counts["requests"] += 1
            if rec.kind == "call":
                self._counts["calls"] += 1
                if rec.exit_code != 0:
                    self._counts["errors"] += 1
            elif rec.kind == "bad-request":
                self._counts["bad_requests"] += 1
            elif rec.kind == "refused":
                self._counts["refused"] += 1
            self._in_flight -= 1
            self._idle.notify_all()
        if rec.kind == "call":
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

    def _reply(self, call: _Call, reply: Reply) -> bool:
        """Send the reply; False when the caller is gone (it never saw the result)."""
        start = time.perf_counter_ns()
        call.record.exit_code = reply.exit_code
        delivered = True
        try:
            call.conn.settimeout(self.recv_timeout)
            call.conn.sendall(protocol.encode_reply(reply), socket.MSG_NOSIGNAL)
        except OSError as exc:
            call.record.note = f"client gone before the reply: {exc}"
            delivered = False
        call.record.send = _ms(start, time.perf_counter_ns())
        return delivered

    def _undo_add(self, call: _Call, req: Request, reply: Reply) -> None:
        """An ADD whose caller died before it got the result: the runtime will treat the ADD
        as failed and has no result to cache, so nothing may stay half-made. Run the same
        plugin's DEL, with the ADD's result as prevResult, as the caller would have."""
        try:
            config = json.loads(req.stdin)
            config["prevResult"] = json.loads(reply.stdout)
            stdin = json.dumps(config).encode()
        except (ValueError, TypeError, AttributeError):
            stdin = req.stdin
        undo = dataclasses.replace(req, env={**req.env, "CNI_COMMAND": "DEL"}, stdin=stdin)
        result = self._execute(undo)
        outcome = "rolled back" if result.exit_code == 0 else "rollback DEL failed"
        call.record.note += f"; {outcome}"
        log.warning(
            "%s %s ADD: caller gone before the reply, %s",
            req.env.get("CNI_CONTAINERID", "-")[:12],
            req.plugin_type,
            outcome,
        )

    def _receive(self, call: _Call) -> None:
        try:
            try:
                call.request = _read_request(call.conn, self.recv_timeout)
            finally:
                call.record.recv = _ms(call.accepted_ns, time.perf_counter_ns())
        except CNIError as err:
            call.record.kind = "bad-request"
            call.record.note = str(err)
            self._reply(call, protocol.error_reply(err))
            self._finish(call)
            return
        except OSError as exc:
            call.record.kind = "bad-request"
            call.record.exit_code = 1
            call.record.note = f"client gone while sending: {exc}"
            self._finish(call)
            return
        req = call.request
        if call.peer_uid != 0:  # the socket is 0600 in a 0700 dir; this is the second lock
            call.record.kind = "refused"
            log.warning("refused a request from uid %d (root only)", call.peer_uid)
            denied = CNIError(IO_FAILURE, "permission denied: the pycni daemon serves root only")
            self._reply(call, protocol.error_reply(denied, req.kind))
            self._finish(call)
            return
        if req.kind == protocol.KIND_PING:
            call.record.kind = "ping"
            self._reply(call, Reply(0, self._json(self.health()), b"", req.kind))
            self._finish(call)
            return
        if req.kind == protocol.KIND_STATS:
            call.record.kind = "stats"
            self._reply(call, Reply(0, self._json(self.stats()), b"", req.kind))
            self._finish(call)
            return
        rec = call.record
        rec.plugin_type = req.plugin_type
        rec.command = req.env.get("CNI_COMMAND", "")
        rec.container_id = req.env.get("CNI_CONTAINERID", "")
        call.ready_ns = time.perf_counter_ns()
        if rec.container_id and rec.command != "VERSION":
            self._enter_lane(rec.container_id, call)
        else:
            self._run(call)

    def _enter_lane(self, key: str, call: _Call) -> None:
        with self._lock:
            lane = self._lanes.get(key)
            if lane is not None:
                lane.append(call)
                return
            self._lanes[key] = deque()
        self._run_in_lane(key, call)

    def _run_in_lane(self, key: str, call: _Call) -> None:
        try:
            self._run(call)
        finally:
            with self._lock:
                lane = self._lanes[key]
                following = lane.popleft() if lane else None
                if following is None:
                    del self._lanes[key]
            if following is not None:
                self._jobs.put(lambda: self._run_in_lane(key, following))

    def _run(self, call: _Call) -> None:
        req = call.request
        assert req is not None
        start = time.perf_counter_ns()
        call.record.queue = _ms(call.ready_ns, start)
        try:
            reply = self._execute(req)
            call.record.run = _ms(start, time.perf_counter_ns())
            delivered = self._reply(call, reply)
            if not delivered and reply.exit_code == 0 and req.env.get("CNI_COMMAND") == "ADD":
                self._undo_add(call, req, reply)
        finally:
            self._finish(call)
            self._ensure_home()

    def _execute(self, req: Request) -> Reply:
        state = self.plugins.get(req.plugin_type, "unknown plugin type")
        if state != "ok":
            err = CNIError(
                PLUGIN_NOT_AVAILABLE,
                f"pycni daemon cannot run plugin {req.plugin_type!r}: {state}",
                "check `pycni daemon --ping`; reinstall the entry points with "
                "`pycni plugins install DIR`",
            )
            return protocol.error_reply(err)
        if req.caller_netns_fd is not None:
            try:
                netns.setns(req.caller_netns_fd)
            except OSError as exc:
                err = CNIError(INVALID_NETNS, f"cannot enter the caller's network namespace: {exc}")
                return protocol.error_reply(err)
        try:
            out = self._runner(req.plugin_type, req.env, req.stdin, netns_fd=req.target_netns_fd)
            return Reply(out.exit_code, out.stdout, out.stderr)
        except Exception as exc:  # skel.run does not raise; a bug must still not kill the daemon
            log.exception("plugin %s raised", req.plugin_type)
            return protocol.error_reply(CNIError(INTERNAL, f"{type(exc).__name__}: {exc}"))
        finally:
            if req.caller_netns_fd is not None:
                try:
                    netns.setns(self._home_fd)
                except OSError:
                    log.error("setns back to the daemon's namespace failed")

    # ---- health and stats ----------------------------------------------------------------

    @staticmethod
    def _json(data: dict[str, Any]) -> bytes:
        return (json.dumps(data, indent=2) + "\n").encode()

    def health(self) -> dict[str, Any]:
        with self._lock:
            in_flight = self._in_flight
            workers = len(self._threads)
        return {
            "status": "ok" if not self._stopping.is_set() else "draining",
            "pid": os.getpid(),
            "protocolVersion": protocol.VERSION,
            "uptimeSeconds": round(time.time() - self.started, 3),
            "inFlight": in_flight,
            "workers": workers,
            "plugins": self.plugins,
        }

    def stats(self, recent: int = 20) -> dict[str, Any]:
        with self._lock:
            records = [r for r in self._records if r.kind == "call"]
            counts = dict(self._counts)
            in_flight = self._in_flight
        phases: dict[str, dict[str, float]] = {}
        for phase in _PHASES:
            values = sorted(getattr(r, phase) for r in records)
            phases[phase] = {
                "p50": _percentile(values, 0.5),
                "p90": _percentile(values, 0.9),
                "p99": _percentile(values, 0.99),
                "max": round(values[-1], 3) if values else 0.0,
                "mean": round(sum(values) / len(values), 3) if values else 0.0,
            }
        return {
            "pid": os.getpid(),
            "uptimeSeconds": round(time.time() - self.started, 3),
            "inFlight": in_flight,
            "counts": counts,
            "window": len(records),
            "phasesMs": phases,
            "recent": [r.as_dict() for r in list(records)[-recent:]],
        }


def _recv_exact(conn: socket.socket, size: int, fds: list[int]) -> bytes:
    """Read exactly ``size`` bytes, collecting any fds that arrive (closed by the caller)."""
    buf = bytearray()
    space = socket.CMSG_SPACE(4 * (protocol.MAX_FDS + 1))
    while len(buf) < size:
        data, ancdata, msg_flags, _ = conn.recvmsg(min(size - len(buf), 1 << 20), space)
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds.extend(struct.unpack(f"{usable // 4}i", payload[:usable]))
        if msg_flags & socket.MSG_CTRUNC:
            raise protocol.malformed("too many fds attached")
        if not data:
            raise ConnectionError(f"client closed after {len(buf)} of {size} bytes")
        buf += data
    return bytes(buf)


def _read_request(conn: socket.socket, timeout: float) -> Request:
    """Receive and strictly parse one request; fds are owned by the Request (or closed)."""
    conn.settimeout(timeout)
    fds: list[int] = []
    try:
        prefix = protocol.parse_request_prefix(_recv_exact(conn, protocol.REQUEST_PREFIX.size, fds))
        head = _recv_exact(conn, prefix.head_len, fds)
        body = _recv_exact(conn, prefix.body_len, fds)
        if len(fds) != prefix.fd_count:
            raise protocol.malformed(f"{len(fds)} fds attached, flags announce {prefix.fd_count}")
        req = Request(prefix.kind)
        if prefix.kind == protocol.KIND_CALL:
            req.plugin_type, req.env = protocol.parse_call_head(head)
            req.stdin = body
            queue_fds = list(fds)
            if prefix.flags & protocol.FLAG_CALLER_NETNS:
                req.caller_netns_fd = queue_fds.pop(0)
            if prefix.flags & protocol.FLAG_TARGET_NETNS:
                req.target_netns_fd = queue_fds.pop(0)
        fds.clear()  # handed over to the Request
        return req
    except TimeoutError:
        raise protocol.malformed(f"incomplete request after {timeout:g} s") from None
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
