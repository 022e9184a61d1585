"""Processes of the machine: subprocess to start, /proc to look, kill(2) to signal."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pycni.process.processes import Finished, Processes


class RealProcesses:
    """The node's processes, as every plugin call on the real host is handed them."""

    __slots__ = ()

    def which(self, name: str) -> str | None:
        from pycni.net import tools  # the per-call PATH the daemon sets

        return tools.which(name)

    def run_detached(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float
    ) -> Finished:
        import subprocess  # not on the cold path: only dnsname starts a program

        from pycni.process.processes import Finished

        try:
            proc = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                env=dict(env),
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"{argv[0]} did not exit within {timeout:g}s") from exc
        return Finished(proc.returncode, proc.stdout.decode(errors="replace").strip())

    def cmdline(self, pid: int) -> list[str]:
        try:
            with open(f"/proc/{int(pid)}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            return []
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]

    def alive(self, pid: int) -> bool:
        try:
            with open(f"/proc/{int(pid)}/stat") as fh:
                stat = fh.read()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]

    def signal(self, pid: int, signum: int) -> None:
        if pid <= 0:  # kill(0) and kill(-1) would signal groups: never a child of ours
            raise ProcessLookupError(f"not a process id: {pid}")
        os.kill(pid, signum)


REAL = RealProcesses()

if TYPE_CHECKING:
    _check: type[Processes] = RealProcesses  # mypy proves it satisfies the Protocol
