"""The Processes Protocol: start a self-daemonizing program, look at a pid, signal it.

A plugin call never keeps a child: what it starts (dnsmasq) daemonizes itself and writes its
own pid file, so a later call (maybe of another implementation) finds it by that file. What a
plugin needs is therefore: find the program in PATH, run it until its parent exits (in a new
session, output captured), tell whether a pid is a live process running a given command line,
and signal it. Errors are OSError (ProcessLookupError for a pid that is gone).

The real one is pycni.process.real (``REAL``); the fake pycni.process.fake_processes.
"""

from __future__ import annotations

from pycni.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Protocol
else:
    Protocol = object  # typing is not imported at run time


@record(frozen=True)
class Finished:
    """How a run ended: the exit status and what it wrote (stdout and stderr together)."""

    returncode: int
    output: str


class Processes(Protocol):
    """The node's processes, as a plugin may touch them (see the module docstring)."""

    def which(self, name: str) -> str | None:
        """``name`` as found in the caller's PATH (Go's exec.LookPath), or None."""
        ...

    def run_detached(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float
    ) -> Finished:
        """Run ``argv`` in a new session, stdin closed, until it exits (a daemonizing program:
        until its parent exits); TimeoutError after ``timeout`` seconds, OSError when it
        cannot be started."""
        ...

    def cmdline(self, pid: int) -> list[str]:
        """The argv of process ``pid`` ([] when there is none)."""
        ...

    def alive(self, pid: int) -> bool:
        """``pid`` is a process that has not exited (a zombie has)."""
        ...

    def signal(self, pid: int, signum: int) -> None:
        """Send ``signum`` to ``pid`` (ProcessLookupError when it is gone)."""
        ...
