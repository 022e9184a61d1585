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
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

import pycni
from pycni.fast.metrics_http import MetricsHTTPServer
from pycni.fast.stats import CallRecord

__all__ = ["DaemonMetrics", "MetricsAddressError"]

COMMANDS = frozenset({"ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"})
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10, 30, 120)


class MetricsAddressError(ValueError):
    """--metrics is neither unix:/absolute/path nor a loopback HOST:PORT."""


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
        self._servers: list[tuple[MetricsHTTPServer, str | None]] = []

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
        """Start serving on ``address`` from a thread; returns where it listens."""
        listener, where, path = _listen(address)
        server = MetricsHTTPServer(listener, lambda: generate_latest(self.registry))
        server.start()
        self._servers.append((server, path))
        return where

    @property
    def servers(self) -> list[MetricsHTTPServer]:
        return [server for server, _path in self._servers]

    def close(self) -> None:
        for server, path in self._servers:
            server.close()
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self._servers.clear()


def _listen(address: str) -> tuple[socket.socket, str, str | None]:
    """A listening socket for ``address``: (socket, where, unix path or None)."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        if not os.path.isabs(path):
            raise MetricsAddressError(f"--metrics unix:PATH needs an absolute path, not {path!r}")
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
    sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(ip), port))
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
            raise MetricsAddressError(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale
        else:
            raise MetricsAddressError(f"something is serving on {path} already")
        finally:
            probe.close()
