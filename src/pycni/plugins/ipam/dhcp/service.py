"""Run the DHCP daemon as a process: ``<bin dir>/dhcp daemon [flags]`` and ``pycni dhcp-daemon``.

Both command lines end here, so a distro unit's ``ExecStart=/opt/cni/bin/dhcp daemon`` and
pycni's own command start the same daemon. In the reference's order: the pidfile is written
(an absolute path, else exit 1), then the socket systemd passed is taken (socket activation)
or ``hostprefix + socketpath`` is bound; SIGTERM/SIGINT stop it, remove the pidfile and the
socket it bound itself, and exit 0. Leases are not released on the way out.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from pycni.plugins.ipam.dhcp import activation, flags
from pycni.plugins.ipam.dhcp.client import ClientTuning
from pycni.plugins.ipam.dhcp.daemon import DhcpDaemon, DhcpServer
from pycni.plugins.ipam.dhcp.store import LeaseStore

log = logging.getLogger("pycni.dhcp")


def _error(message: str) -> int:
    """As the reference reports a failed start: a Go ``log`` line, exit code 1."""
    sys.stderr.write(time.strftime("%Y/%m/%d %H:%M:%S ") + message + "\n")
    return 1


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # Go's %q, for paths


def run(options: flags.DaemonOptions, log_level: str = "INFO") -> int:
    """Serve until SIGTERM/SIGINT; the process exit code."""
    gc.enable()  # a one-shot entry point turned it off; a daemon runs for months
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s dhcp %(message)s", stream=sys.stderr
    )
    if options.pidfile:
        if not os.path.isabs(options.pidfile):
            return _error(f"Error writing pidfile {_quote(options.pidfile)}: path not absolute")
        try:
            with open(options.pidfile, "w") as fh:
                fh.write(str(os.getpid()))
        except OSError as exc:
            return _error(f"Error writing pidfile {_quote(options.pidfile)}: {exc}")
    tuning = ClientTuning(
        options.timeout, options.resend_max, options.resend_timeout, options.broadcast
    )
    store = LeaseStore(options.lease_dir) if options.lease_dir else None
    daemon = DhcpDaemon(tuning, store, host_prefix=options.host_prefix)
    path = options.host_prefix + options.socket_path
    try:
        server = DhcpServer(daemon, path, activation.listener())
    except OSError as exc:
        _remove(options.pidfile)
        return _error(f"Error getting listener: {exc}")
    resumed = daemon.restore()
    how = "socket passed by systemd" if not server.owned else path
    log.info("serving on %s (%d stored leases resumed)", how, resumed)

    def stop(_sig: int, _frame: FrameType | None) -> None:
        server.close()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        server.close()
        daemon.close()
        _remove(options.pidfile)
    return 0


def _remove(path: str) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


def command_line(args: Sequence[str]) -> int:
    """``dhcp daemon ARGS``: the reference's flags (Go syntax), exit codes as its binary's."""
    try:
        options = flags.parse(args)
    except flags.HelpRequested:
        sys.stderr.write(flags.USAGE)
        return 0
    except flags.FlagError as exc:
        sys.stderr.write(f"{exc}\n{flags.USAGE}")
        return 2
    return run(options)
