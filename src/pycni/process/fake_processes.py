"""FakeProcesses: the Processes seam as a table of pretend processes, for rootless tests.

A test installs a program (``install(name, behaviour)``): when a plugin runs it, the behaviour
is called with the fake and the argv and returns how the run ended; it may ``spawn`` the
daemon the program leaves behind (a pid with that argv) and write its pid file in a
FakeStateFiles. ``runs`` and ``signals`` record what the plugin did (``history`` both, in
order); SIGKILL and SIGTERM end a
process, ``kill(pid)`` ends one as someone else would, ``zombie(pid)`` leaves it unreaped.
Nothing in pycni imports this module; it lives in src/ to be type-checked with the Protocol.
"""

from __future__ import annotations

import errno
import os
import signal as _signal
from collections.abc import Callable, Mapping, Sequence

from pycni.process.processes import Finished

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.process.processes import Processes

Behaviour = Callable[["FakeProcesses", list[str]], Finished]


class FakeProcesses:
    """Installed programs by name, live processes by pid, and what was done to them."""

    def __init__(self) -> None:
        self.programs: dict[str, tuple[str, Behaviour]] = {}  # name -> (path, behaviour)
        self.procs: dict[int, list[str]] = {}  # live: pid -> argv
        self.zombies: set[int] = set()
        self.runs: list[list[str]] = []
        self.signals: list[tuple[int, int]] = []
        self.history: list[tuple[str, list[str], int]] = []  # ("run"|"signal", argv, signum)
        self._next_pid = 4000

    def install(self, name: str, behaviour: Behaviour, path: str = "") -> str:
        path = path or f"/usr/sbin/{name}"
        self.programs[name] = (path, behaviour)
        return path

    def spawn(self, argv: Sequence[str]) -> int:
        """A new live process running ``argv`` (what a daemonizing program leaves)."""
        self._next_pid += 1
        self.procs[self._next_pid] = list(argv)
        return self._next_pid

    def kill(self, pid: int) -> None:
        """The process ends (killed by someone else, OOM...)."""
        self.procs.pop(pid, None)
        self.zombies.discard(pid)

    def zombie(self, pid: int) -> None:
        self.zombies.add(pid)

    # ------------------------------------------------------------ the Processes protocol

    def which(self, name: str) -> str | None:
        found = self.programs.get(name)
        return found[0] if found else None

    def run_detached(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float
    ) -> Finished:
        self.runs.append(list(argv))
        self.history.append(("run", list(argv), 0))
        for path, behaviour in self.programs.values():
            if argv[0] == path:
                return behaviour(self, list(argv))
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])

    def cmdline(self, pid: int) -> list[str]:
        return list(self.procs.get(pid, []))

    def alive(self, pid: int) -> bool:
        return pid in self.procs and pid not in self.zombies

    def signal(self, pid: int, signum: int) -> None:
        if pid not in self.procs:
            raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH))
        self.signals.append((pid, signum))
        self.history.append(("signal", list(self.procs[pid]), signum))
        if signum in (_signal.SIGKILL, _signal.SIGTERM):
            self.kill(pid)


if TYPE_CHECKING:
    _check: type[Processes] = FakeProcesses  # mypy proves it satisfies the Protocol
