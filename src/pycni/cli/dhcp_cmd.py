"""``pycni dhcp-daemon``: the DHCP daemon the dhcp IPAM plugin talks to."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from types import FrameType

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "dhcp-daemon",
        help="run the DHCP daemon for the dhcp IPAM plugin",
        description="Acquire, renew and release DHCP leases for pods on behalf of the dhcp "
        "IPAM plugin (the reference's `dhcp daemon`).",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from pycni.plugins.ipam.dhcp.protocol import DEFAULT_SOCKET
    from pycni.plugins.ipam.dhcp.store import DEFAULT_LEASE_DIR

    p.add_argument(
        "--socket", default=DEFAULT_SOCKET, help=f"unix socket (default {DEFAULT_SOCKET})"
    )
    p.add_argument(
        "--lease-dir",
        default=DEFAULT_LEASE_DIR,
        help=f"where leases are kept across restarts (default {DEFAULT_LEASE_DIR}; '' = nowhere)",
    )
    p.add_argument("--pidfile", default="", help="write the daemon's PID here (absolute path)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each reply")
    p.add_argument("--resend-max", type=float, default=62.0, help="longest retry delay (s)")
    p.add_argument(
        "--resend-timeout", type=float, default=208.0, help="give up an exchange after (s)"
    )
    p.add_argument(
        "--broadcast", action="store_true", help="ask servers to broadcast their replies"
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def run(args: argparse.Namespace) -> int:
    import logging
    import os

    from pycni.plugins.ipam.dhcp.client import ClientTuning
    from pycni.plugins.ipam.dhcp.daemon import DhcpDaemon, DhcpServer
    from pycni.plugins.ipam.dhcp.store import LeaseStore

    logging.basicConfig(
        level=str(args.log_level).upper(), format="%(asctime)s dhcp %(message)s", stream=sys.stderr
    )
    if args.pidfile and not os.path.isabs(args.pidfile):
        sys.stderr.write(f"pycni dhcp-daemon: pidfile {args.pidfile!r}: path not absolute\n")
        return 2
    tuning = ClientTuning(args.timeout, args.resend_max, args.resend_timeout, args.broadcast)
    daemon = DhcpDaemon(tuning, LeaseStore(args.lease_dir) if args.lease_dir else None)
    try:
        server = DhcpServer(daemon, args.socket)
    except OSError as exc:
        sys.stderr.write(f"pycni dhcp-daemon: {exc}\n")
        return 1
    if args.pidfile:
        with open(args.pidfile, "w") as fh:
            fh.write(str(os.getpid()))
    resumed = daemon.restore()
    logging.getLogger("pycni.dhcp").info(
        "serving on %s (%d stored leases resumed)", args.socket, resumed
    )
    done = threading.Event()

    def stop(_sig: int, _frame: FrameType | None) -> None:
        done.set()
        server.close()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    while not done.wait(1.0):
        pass
    daemon.close()
    if args.pidfile:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(args.pidfile)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="pycni dhcp-daemon")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
