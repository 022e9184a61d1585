"""``pycni dhcp-daemon``: the DHCP daemon the dhcp IPAM plugin talks to.

The same daemon as ``<bin dir>/dhcp daemon`` (the reference's command line, see
pycni.plugins.ipam.dhcp.flags), with GNU-style options.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import sys


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
    p.add_argument(
        "--host-prefix",
        default="",
        help="where the node's / is mounted when run in a container (the reference's -hostprefix)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def run(args: argparse.Namespace) -> int:
    from pycni.plugins.ipam.dhcp import service
    from pycni.plugins.ipam.dhcp.flags import DaemonOptions

    options = DaemonOptions(
        socket_path=args.socket,
        pidfile=args.pidfile,
        host_prefix=args.host_prefix,
        broadcast=args.broadcast,
        timeout=args.timeout,
        resend_max=args.resend_max,
        resend_timeout=args.resend_timeout,
        lease_dir=args.lease_dir,
    )
    return service.run(options, log_level=str(args.log_level))


def main() -> int:
    parser = argparse.ArgumentParser(prog="pycni dhcp-daemon")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
