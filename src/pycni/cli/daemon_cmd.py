"""`pycni daemon`: run the warm daemon in the foreground, or query a running one.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from pycni.daemon import protocol


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "daemon",
        help="run the warm plugin daemon (foreground), or query one",
        description="Serve plugin calls forwarded by the installed entry points. "
        "Runs in the foreground until SIGTERM/SIGINT, then finishes in-flight calls.",
    )
    parser.add_argument("--socket", default=protocol.DEFAULT_SOCKET, help="unix socket path")
    parser.add_argument("--workers", type=int, default=16, help="worker threads (default 16)")
    parser.add_argument(
        "--drain-timeout", type=float, default=120.0, help="seconds to wait for in-flight calls"
    )
    parser.add_argument(
        "--call-timeout",
        type=float,
        default=120.0,
        help="deadline of one call in seconds, queueing included; then it is cancelled and "
        "rolled back (default 120, kubelet's runtime-request-timeout)",
    )
    parser.add_argument(
        "--recv-timeout",
        type=float,
        default=10.0,
        help="seconds a whole request may take to arrive (default 10)",
    )
    parser.add_argument(
        "--max-per-container",
        type=int,
        default=8,
        help="calls admitted per container, running or waiting; more get code 11 (default 8)",
    )
    parser.add_argument(
        "--max-queued",
        type=int,
        default=256,
        help="calls admitted in total, running or waiting; more get code 11 (default 256)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections before accepting pauses (default: from the fd limit)",
    )
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="exit after this many seconds without a call (default 0: never; an autostarted "
        "daemon gets the value given to `pycni plugins install --idle-exit`)",
    )
    parser.add_argument(
        "--autostart-lock-fd", type=int, default=None, help=argparse.SUPPRESS
    )  # set by the entry points that start a daemon (daemon/autostart.py)
    parser.add_argument(
        "--metrics",
        metavar="ADDRESS",
        default=None,
        help="serve Prometheus metrics on unix:/PATH or a loopback HOST:PORT "
        "(127.0.0.1:9464); off by default (names: docs/daemon.md)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        default=None,
        help="export each call's timings as OpenTelemetry spans (OTLP/HTTP, JSON) to "
        "URL/v1/traces; default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
        "$OTEL_EXPORTER_OTLP_ENDPOINT, else off (docs/daemon.md)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    query = parser.add_mutually_exclusive_group()
    query.add_argument("--stats", action="store_true", help="print a running daemon's stats")
    query.add_argument("--ping", action="store_true", help="check a running daemon's health")
    parser.set_defaults(func=run)


def _print(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def run(args: argparse.Namespace) -> int:
    from pycni.daemon import client

    if args.stats or args.ping:
        try:
            _print(client.stats(args.socket) if args.stats else client.ping(args.socket))
        except (client.DaemonUnavailable, OSError, ValueError) as exc:
            sys.stderr.write(f"pycni daemon: {exc}\n")
            return 1
        return 0
    if os.geteuid() != 0:
        sys.stderr.write("pycni daemon: must run as root (plugins change the network)\n")
        return 1
    if args.workers < 1:
        sys.stderr.write("pycni daemon: --workers must be at least 1\n")
        return 2
    positive = ("call_timeout", "recv_timeout", "max_per_container", "max_queued")
    for name in positive:
        if getattr(args, name) <= 0:
            sys.stderr.write(f"pycni daemon: --{name.replace('_', '-')} must be positive\n")
            return 2
    if args.idle_exit < 0:
        sys.stderr.write("pycni daemon: --idle-exit must be 0 (never) or positive\n")
        return 2
    autostarted = args.autostart_lock_fd is not None
    if autostarted:
        from pycni.daemon import autostart

        autostart.trim_log()
        try:
            autostart.adopt_lock(args.autostart_lock_fd, args.socket)
        except autostart.LockError as exc:
            sys.stderr.write(f"pycni daemon: {exc}\n")
            return 1
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    otlp_url = None
    if args.otlp_endpoint or any(k.startswith("OTEL_EXPORTER_OTLP") for k in os.environ):
        from pycni.daemon.otlp import EndpointError, endpoint_from

        try:
            otlp_url = endpoint_from(args.otlp_endpoint, os.environ)
        except EndpointError as exc:
            sys.stderr.write(f"pycni daemon: {exc}\n")
            return 2
    from pycni.daemon.listener import SocketSetupError
    from pycni.daemon.server import Daemon

    daemon = Daemon(
        args.socket,
        workers=args.workers,
        drain_timeout=args.drain_timeout,
        call_timeout=args.call_timeout,
        recv_timeout=args.recv_timeout,
        max_per_container=args.max_per_container,
        max_queued=args.max_queued,
        max_connections=args.max_connections,
        idle_exit=args.idle_exit,
        autostarted=autostarted,
    )
    if args.metrics:  # a malformed address is refused before anything is bound
        from pycni.daemon.metrics import MetricsAddressError, check_address

        try:
            check_address(args.metrics)
        except MetricsAddressError as exc:
            sys.stderr.write(f"pycni daemon: cannot serve metrics on {args.metrics}: {exc}\n")
            return 1
    # The CNI socket first: whatever happens to the metrics, calls are served.
    try:
        daemon.bind()
    except (OSError, SocketSetupError) as exc:
        sys.stderr.write(f"pycni daemon: cannot listen on {args.socket}: {exc}\n")
        return 1
    metrics = None
    if args.metrics:
        from pycni.daemon import policy
        from pycni.daemon.metrics import DaemonMetrics

        daemon.plugins = policy.preload_plugins()
        metrics = DaemonMetrics(daemon.load, daemon.plugins)
        metrics.describe({"started_by": daemon.started_by(), "socket": daemon.socket_path})
        where = metrics.serve_or_retry(args.metrics)  # can't be had now: a warning and retries
        if where is not None:
            logging.getLogger("pycni.daemon").info("metrics on %s", where)
    observers: list[Callable[[Any], None]] = []
    if metrics is not None:
        observers.append(metrics.observe)
    exporter = None
    if otlp_url is not None:
        from pycni.daemon.otlp import Exporter

        exporter = Exporter(otlp_url)
        observers.append(exporter.observe)
        logging.getLogger("pycni.daemon").info("OTLP spans to %s", otlp_url)
    if len(observers) == 1:
        daemon.observe(observers[0])
    elif observers:

        def observe_all(rec: Any) -> None:
            for observe in observers:
                observe(rec)

        daemon.observe(observe_all)
    try:
        daemon.serve_forever()
    finally:
        if metrics is not None:
            metrics.close()
        if exporter is not None:
            exporter.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone form (`python -m pycni.cli.daemon_cmd ...`), same options as `pycni daemon`."""
    parser = argparse.ArgumentParser(prog="pycni")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["daemon", *(sys.argv[1:] if argv is None else argv)])
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
