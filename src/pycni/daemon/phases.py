"""Where a daemon call's time goes, phase by phase (bench/breakdown.py; off unless asked).

Nothing here runs unless :func:`install` is called, which only bench/breakdown.py does (in the
daemon it starts): the daemon's own code has no hook and pays nothing
when this is off. Installed, it wraps a few functions on the call path (the call itself, each
plugin's run, config decode, result encode, host-local's store, fsync, sysctl, setns and the
netlink socket) and books, per worker-thread call, the *exclusive* time spent in each (a phase
nested in another is taken out of its parent, so the phases add up to the call's run time) and
how often each was entered. One JSON line per call goes to the file named on the command line.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pycni.daemon import policy
from pycni.net import ns, thread_sysctl
from pycni.net.netlink.rtnl import wire
from pycni.plugins.ipam.host_local import store
from pycni.skel import run as skel
from pycni.spec import result

Clock = Callable[[], int]
Namer = Callable[[tuple[Any, ...]], str]


class Ledger:
    """One call's bookkeeping: a stack of open phases, exclusive ns and entry counts per name."""

    def __init__(self, meta: dict[str, str], clock: Clock = time.perf_counter_ns) -> None:
        self.meta = meta
        self._clock = clock
        self._stack: list[list[Any]] = []  # [name, start_ns, ns spent in children]
        self.self_ns: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self._start = clock()
        self.enter("call")

    def enter(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        self._stack.append([name, self._clock(), 0])

    def leave(self) -> None:
        name, start, children = self._stack.pop()
        elapsed = self._clock() - start
        self.self_ns[name] = self.self_ns.get(name, 0) + elapsed - children
        if self._stack:
            self._stack[-1][2] += elapsed

    def count(self, name: str, n: int = 1) -> None:
        """Count an event that is not timed on its own (a netlink read inside a request)."""
        self.counts[name] = self.counts.get(name, 0) + n

    def close(self) -> dict[str, Any]:
        """End the call (closing any phase an exception left open): its record."""
        while self._stack:
            self.leave()
        return {
            **self.meta,
            "totalMs": (self._clock() - self._start) / 1e6,
            "phasesMs": {k: v / 1e6 for k, v in self.self_ns.items()},
            "counts": dict(self.counts),
        }


_local = threading.local()
_patched: list[tuple[object, str, object]] = []
_out_fd = -1


def _current() -> Ledger | None:
    ledger: Ledger | None = getattr(_local, "ledger", None)
    return ledger


def _wrap(owner: object, attr: str, name: str | Namer) -> None:
    """Time ``owner.attr`` as phase ``name`` (or ``name(args)``) whenever a call is booked."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        ledger = _current()
        if ledger is None:
            return original(*args, **kwargs)
        ledger.enter(name if isinstance(name, str) else name(args))
        try:
            return original(*args, **kwargs)
        finally:
            ledger.leave()

    _patched.append((owner, attr, original))
    setattr(owner, attr, timed)


def _counted(owner: object, attr: str, name: str) -> None:
    """Count calls of ``owner.attr`` (no timing of its own) whenever a call is booked."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        ledger = _current()
        if ledger is not None:
            ledger.count(name)
        return original(*args, **kwargs)

    _patched.append((owner, attr, original))
    setattr(owner, attr, counted)


def _book_call(owner: object, attr: str) -> None:
    """The call boundary (policy.execute on a worker thread): open a ledger, write its line."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def booked(runner: Any, req: Any, *rest: Any) -> Any:
        meta = {
            "plugin": str(req.plugin_type),
            "command": req.env.get("CNI_COMMAND", ""),
            "containerId": req.env.get("CNI_CONTAINERID", ""),
        }
        ledger = _local.ledger = Ledger(meta)
        try:
            return original(runner, req, *rest)
        finally:
            _local.ledger = None
            line = json.dumps(ledger.close(), separators=(",", ":")) + "\n"
            os.write(_out_fd, line.encode())

    _patched.append((owner, attr, original))
    setattr(owner, attr, booked)


def _plugin_name(args: tuple[Any, ...]) -> str:
    return f"plugin:{type(args[0]).__name__}"


def install(out_path: str) -> None:
    """Wrap the call path's functions; one line per call is appended to ``out_path``."""
    global _out_fd

    _out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    _book_call(policy, "execute")
    _wrap(skel, "run_plugin", _plugin_name)
    _wrap(skel, "_parse_config", "decode")
    _wrap(result.Result, "to_json", "encode")
    _wrap(store.Store, "__init__", "ipam-store")
    _wrap(store.Store, "reserve", "ipam-store")
    _wrap(store.Store, "release_by_id", "ipam-store")
    _wrap(os, "fsync", "fsync")
    _wrap(thread_sysctl, "read", "sysctl-read")
    _wrap(thread_sysctl, "write", "sysctl-write")
    _wrap(ns, "setns", "setns")
    _wrap(wire.Socket, "__init__", "netlink-open")
    _wrap(wire.Socket, "close", "netlink-close")
    _wrap(wire.Socket, "request", "netlink")
    _counted(wire.Socket, "_recv", "netlink-reads")


def uninstall() -> None:
    """Put every wrapped function back (tests)."""
    global _out_fd
    while _patched:
        owner, attr, original = _patched.pop()
        setattr(owner, attr, original)
    if _out_fd >= 0:
        os.close(_out_fd)
        _out_fd = -1
