"""The reference's ``dhcp daemon`` command line, parsed as Go's ``flag`` package parses it.

Distro units run ``/opt/cni/bin/dhcp daemon -socketpath … -timeout 30s``: the same words must
mean the same on pycni's ``dhcp`` entry point. So: ``-name value``, ``-name=value``, two dashes
alike; booleans take no value or ``=true``/``=false``; durations are Go durations (``10s``,
``1m30s``, ``250ms``; a bare number only when ``0``); parsing stops at the first non-flag or
``--``; errors and ``-h`` print the reference's usage text and exit 2 and 0 as its binary does.
``-leasedir`` is pycni's own (where leases persist across restarts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from pycni.plugins.ipam.dhcp.protocol import DEFAULT_SOCKET
from pycni.plugins.ipam.dhcp.store import DEFAULT_LEASE_DIR
from pycni.record import record


@record(frozen=True)
class DaemonOptions:
    """What the daemon runs with; durations in seconds, defaults as the reference's."""

    socket_path: str = DEFAULT_SOCKET
    pidfile: str = ""
    host_prefix: str = ""
    broadcast: bool = False
    timeout: float = 10.0
    resend_max: float = 62.0
    resend_timeout: float = 208.0
    lease_dir: str = DEFAULT_LEASE_DIR


class FlagError(ValueError):
    """A bad command line; the message is the reference's first line, exit code 2."""


class HelpRequested(Exception):
    """``-h``/``-help``: print USAGE, exit 0."""


USAGE = f"""Usage of daemon:
  -broadcast
    \tbroadcast DHCP leases
  -hostprefix string
    \toptional prefix to host root
  -leasedir string
    \twhere leases are kept across restarts, '' for nowhere (pycni) (default "{DEFAULT_LEASE_DIR}")
  -pidfile string
    \toptional path to write daemon PID to
  -resendmax duration
    \toptional dhcp client max resend delay between requests (default 1m2s)
  -resendtimeout duration
    \toptional dhcp client resend timeout, no more retries after this timeout (default 3m28s)
  -socketpath string
    \toptional dhcp server socketpath
  -timeout duration
    \toptional dhcp client timeout duration for each request (default 10s)
"""

_STRINGS = {
    "socketpath": "socket_path",
    "pidfile": "pidfile",
    "hostprefix": "host_prefix",
    "leasedir": "lease_dir",
}
_DURATIONS = {"timeout": "timeout", "resendmax": "resend_max", "resendtimeout": "resend_timeout"}
_BOOLS = {"broadcast": "broadcast"}
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d*)(?:\.(\d*))?([a-zA-Z\u00b5\u03bc]+)")
_LIMIT = (1 << 63) * 1e-9  # Go durations are int64 nanoseconds


def _quote(text: str) -> str:
    """Go's %q for the texts a command line holds (JSON's escaping is the same there)."""
    return json.dumps(text, ensure_ascii=False)


def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration``, in seconds; ValueError on anything it refuses."""
    rest = text
    sign = 1.0
    if rest[:1] in ("-", "+"):
        sign = -1.0 if rest[0] == "-" else 1.0
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(f"time: invalid duration {text!r}")
    total = 0.0
    while rest:
        match = _PART.match(rest)
        if match is None or not (match.group(1) or match.group(2)):
            raise ValueError(f"time: invalid duration {text!r}")
        unit = _UNITS.get(match.group(3))
        if unit is None:
            raise ValueError(f"time: unknown unit {match.group(3)!r} in duration {text!r}")
        whole, frac = match.group(1) or "0", match.group(2) or ""
        total += (int(whole) + (int(frac) / 10 ** len(frac) if frac else 0.0)) * unit
        if total > _LIMIT:
            raise ValueError(f"time: invalid duration {text!r}")
        rest = rest[match.end() :]
    return sign * total


def parse(args: Sequence[str]) -> DaemonOptions:
    """The options of ``dhcp daemon ARGS`` (ARGS after the word ``daemon``)."""
    values: dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if len(arg) < 2 or arg[0] != "-":
            break  # the first non-flag ends the flags (the rest is ignored, as Go's)
        dashes = 2 if arg[1] == "-" else 1
        if dashes == 2 and len(arg) == 2:
            break  # "--" terminates
        body = arg[dashes:]
        if not body or body[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        i += 1
        if name in ("h", "help"):
            raise HelpRequested()
        if name in _BOOLS:
            if has_value and value not in _TRUE | _FALSE:
                raise FlagError(f"invalid boolean value {_quote(value)} for -{name}: parse error")
            values[_BOOLS[name]] = not has_value or value in _TRUE
            continue
        if name not in _STRINGS and name not in _DURATIONS:
            raise FlagError(f"flag provided but not defined: -{name}")
        if not has_value:
            if i >= len(args):
                raise FlagError(f"flag needs an argument: -{name}")
            value = args[i]
            i += 1
        if name in _STRINGS:
            values[_STRINGS[name]] = value
            continue
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise FlagError(
                f"invalid value {_quote(value)} for flag -{name}: parse error"
            ) from None
        if seconds < 0:  # Go takes it; a negative wait means nothing useful, so refuse it
            raise FlagError(f"invalid value {_quote(value)} for flag -{name}: negative duration")
        values[_DURATIONS[name]] = seconds
    if values.get("socket_path") == "":
        values["socket_path"] = DEFAULT_SOCKET  # as the reference: empty means the default
    return DaemonOptions(**values)  # type: ignore[arg-type]
