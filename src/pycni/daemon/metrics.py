"""The daemon's Prometheus metrics (`pycni daemon --metrics unix:PATH | 127.0.0.1:PORT`).

Off by default. Served from one thread of their own (metrics_http.py: a connection cap and
a deadline per connection, no thread per connection) so a scrape never runs on the daemon's
main loop and no caller can make the endpoint hold more than a few fds. Per call the hot
path adds one histogram observation (and one counter increment for an error), done when the
call is recorded, after its reply was written; every other number is read from the daemon
at scrape time. Measured: see docs/daemon.md (Metrics).

Names (all prefixed ``pycni_``): ``call_duration_seconds{plugin,command}`` (histogram, from
accept to the reply written), ``call_errors_total{plugin,command,code}`` (CNI error code of a
failed call), ``calls_in_flight``, ``calls_queued``, ``workers``, the daemon's counters as
``daemon_<counter>_total`` (``daemon_rolled_back_total`` counts ADDs rolled back because
their caller never got the result), and ``daemon_info{started_by,...}`` (how it started:
autostart, socket-activation, systemd or manual).

Labels are bounded: plugin types the daemon serves (else "other"), the CNI verbs (else
"other"), codes 0-999 (else "other"): a caller cannot grow the label sets.

The metrics never decide whether the daemon serves: it binds the CNI socket first, and an
address that cannot be had (a port someone else bound, a socket path in use) is a warning
and a retry (``serve_or_retry``), never an exit. The text is rendered at most once per
``RENDER_EVERY`` seconds and shared by every scrape: scrapers in a loop cost the calls next
to nothing (rendering the registry anew per request took the interpreter from the workers).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

import pycni
from pycni.daemon.metrics_http import MetricsHTTPServer
from pycni.daemon.stats import CallRecord

COMMANDS = frozenset({"ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"})
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10, 30, 120)


RENDER_EVERY = 1.0  # seconds: scrapes within this get the text rendered for the first one
RETRY_EVERY = 1.0  # seconds between tries of an address that could not be had (one bind)

log = logging.getLogger("pycni.daemon")


class MetricsAddressError(ValueError):
    """--metrics is neither unix:/absolute/path nor a loopback HOST:PORT."""


class MetricsUnavailable(Exception):
    """The address is valid but cannot be had now (in use, or a non-socket at the path)."""


class SharedRender:
    """``render()`` at most once per ``every`` seconds; every caller in between (any thread,
    any server) gets the same bytes. A failure is not kept: the next scrape tries again."""

    def __init__(
        self,
        render: Callable[[], bytes],
        every: float = RENDER_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._render = render
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._text: bytes | None = None
        self._at = 0.0
        self.renders = 0  # how many times the registry was rendered (tests, curiosity)

    def __call__(self) -> bytes:
        with self._lock:
            now = self._clock()
            if self._text is None or now - self._at >= self._every:
                self._text = None
                text = self._render()
                self.renders += 1
                self._text, self._at = text, now
            return self._text


class _Load(Collector):
    """Numbers read from the daemon when scraped: counters, calls in flight and queued."""

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        for _ in range(3):  # the main loop may change a dict while we read it
            try:
                load = self._read()
                break
            except RuntimeError:
                continue
        else:
            return
        yield GaugeMetricFamily(
            "pycni_calls_in_flight",
            "Connections open and calls not finished (receiving, queued, running, replying)",
            value=load["in_flight"],
        )
        yield GaugeMetricFamily(
            "pycni_calls_queued",
            "Admitted calls waiting behind an earlier call of their container or for a worker",
            value=load["queued"],
        )
        yield GaugeMetricFamily("pycni_workers", "Worker threads", value=load["workers"])
        for name, value in sorted(load["counts"].items()):
            yield CounterMetricFamily(
                f"pycni_daemon_{name}", f"Daemon counter {name} (pycni daemon --stats)", value
            )


class DaemonMetrics:
    """One registry per daemon: the observer it calls per recorded call, and the servers."""

    def __init__(
        self,
        read_load: Callable[[], Mapping[str, Any]],
        plugins: Iterable[str],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._plugins = frozenset(plugins)
        self._duration = Histogram(
            "pycni_call_duration_seconds",
            "Plugin calls served, from accept to the reply written",
            ["plugin", "command"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._errors = Counter(
            "pycni_call_errors",
            "Plugin calls that failed, by CNI error code",
            ["plugin", "command", "code"],
            registry=self.registry,
        )
        self._info = Info("pycni_daemon", "How this daemon was started", registry=self.registry)
        self._info.info({"version": pycni.__version__})
        self.registry.register(_Load(read_load))
        self.render = SharedRender(lambda: generate_latest(self.registry))
        self._servers: list[tuple[MetricsHTTPServer, str | None]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._retries: list[threading.Thread] = []

    def describe(self, labels: Mapping[str, str]) -> None:
        """Label pycni_daemon_info (started_by, socket): known once the socket is bound."""
        self._info.info({"version": pycni.__version__, **labels})

    def observe(self, rec: CallRecord) -> None:
        """Called for every recorded request (the daemon's Stats observer)."""
        if rec.kind != "call":
            return
        plugin = rec.plugin_type if rec.plugin_type in self._plugins else "other"
        command = rec.command if rec.command in COMMANDS else "other"
        self._duration.labels(plugin, command).observe(rec.total / 1000.0)
        if rec.exit_code != 0:
            code = str(rec.error_code) if 0 <= rec.error_code <= 999 else "other"
            self._errors.labels(plugin, command, code).inc()

    def serve(self, address: str) -> str:
        """Start serving on ``address`` from a thread; returns where it listens. Raises
        MetricsAddressError, MetricsUnavailable or OSError."""
        listener, where, path = _listen(check_address(address))
        server = MetricsHTTPServer(listener, self.render)
        with self._lock:
            if self._closed.is_set():
                listener.close()
                return where
            server.start()
            self._servers.append((server, path))
        return where

    def serve_or_retry(self, address: str) -> str | None:
        """``serve``, except that an address that cannot be had now is a warning and a retry
        from a thread (every RETRY_EVERY s: a bind, nothing more) until it is had or
        ``close()``: where it listens, or None while retrying. A malformed address still
        raises MetricsAddressError (before anything was bound)."""
        check_address(address)
        try:
            return self.serve(address)
        except (OSError, MetricsUnavailable) as exc:
            log.warning("cannot serve metrics on %s yet: %s; retrying", address, _why(exc))
        thread = threading.Thread(
            target=self._retry, args=(address,), name="pycni-metrics-retry", daemon=True
        )
        self._retries.append(thread)
        thread.start()
        return None

    def _retry(self, address: str) -> None:
        attempts, last = 1, ""
        while not self._closed.wait(RETRY_EVERY):
            attempts += 1
            try:
                where = self.serve(address)
            except (OSError, MetricsUnavailable, MetricsAddressError) as exc:
                if _why(exc) != last:  # a new reason is worth a line, the same one is not
                    last = _why(exc)
                    log.warning("cannot serve metrics on %s yet: %s; retrying", address, last)
                continue
            if not self._closed.is_set():
                log.info("metrics on %s (after %d attempts)", where, attempts)
            return

    @property
    def servers(self) -> list[MetricsHTTPServer]:
        return [server for server, _path in self._servers]

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            servers, self._servers = self._servers, []
        for thread in self._retries:
            thread.join(10)
        for server, path in servers:
            server.close()
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def check_address(address: str) -> tuple[str, int | str]:
    """("unix", path) or (ip, port) for a valid ``address``; else MetricsAddressError."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        if not os.path.isabs(path):
            raise MetricsAddressError(f"--metrics unix:PATH needs an absolute path, not {path!r}")
        return "unix", path
    host, sep, port_text = address.rpartition(":")
    host = host.strip("[]")
    wrong = MetricsAddressError(
        f"--metrics {address!r}: use unix:/absolute/path or a loopback HOST:PORT "
        "(127.0.0.1:9464, [::1]:9464): metrics are for this node only"
    )
    try:
        port = int(port_text)
        ip = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        raise wrong from None
    if not sep or not ip.is_loopback or not 0 <= port <= 65535:
        raise wrong
    return str(ip), port


def _listen(address: tuple[str, int | str]) -> tuple[socket.socket, str, str | None]:
    """A listening socket for a checked address: (socket, where, unix path or None)."""
    kind, where = address
    if kind == "unix":
        path = str(where)
        _remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # root only, like the daemon's socket
        try:
            sock.bind(path)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
        sock.listen(64)
        return sock, f"unix:{path}", path
    ip = ipaddress.ip_address(kind)
    sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(ip), int(where)))
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    bound_port = sock.getsockname()[1]
    shown = f"[{ip}]" if ip.version == 6 else str(ip)
    return sock, f"{shown}:{bound_port}", None


def _remove_stale(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise MetricsUnavailable(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale
        else:
            raise MetricsUnavailable(f"something is serving on {path} already")
        finally:
            probe.close()
