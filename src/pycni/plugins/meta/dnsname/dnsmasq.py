"""One network's dnsmasq: start it, reload it (SIGHUP), stop it, and tell whether it runs.

dnsmasq daemonizes itself and writes the pid file named in its config; we only ever signal a
pid read from that file after the process table shows it is a dnsmasq started with *this*
network's ``--conf-file`` (the reference signals whatever pid the file holds, so a stale file
could make it kill an unrelated process). The processes and the pid file come from the seam
(``req.host.processes()`` and ``req.host.state()``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from pycni.plugins.meta.dnsname.files import NetworkFiles
from pycni.spec.errors import InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.process.processes import Finished, Processes
    from pycni.state.files import StateFiles

BINARY = "dnsmasq"
START_TIMEOUT = 30.0
STOP_WAIT = 2.0
ADDRESS_IN_USE_WAIT = 2.0  # seconds of retrying a start whose address is still held


def argv(binary_path: str, files: NetworkFiles) -> list[str]:
    """The reference's command line."""
    return [binary_path, "-u", "root", f"--conf-file={files.conf}"]


class Dnsmasq:
    """The dnsmasq of the networks of one plugin call, over the node's processes and files."""

    def __init__(self, procs: Processes, fs: StateFiles) -> None:
        self.procs = procs
        self.fs = fs

    def binary(self) -> str | None:
        """dnsmasq as found in the caller's PATH (the reference's exec.LookPath)."""
        return self.procs.which(BINARY)

    def read_pid(self, files: NetworkFiles) -> int | None:
        try:
            text = self.fs.read(str(files.pid_file)).decode(errors="replace").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def serves(self, pid: int, files: NetworkFiles) -> bool:
        """``pid`` is a live dnsmasq started with this network's config file."""
        args = self.procs.cmdline(pid)
        return (
            bool(args)
            and os.path.basename(args[0]) == BINARY
            and f"--conf-file={files.conf}" in args[1:]
            and self.procs.alive(pid)
        )

    def running_pid(self, files: NetworkFiles) -> int | None:
        """The pid of this network's dnsmasq when it runs, else None."""
        pid = self.read_pid(files)
        return pid if pid is not None and self.serves(pid, files) else None

    def start(self, files: NetworkFiles) -> int:
        """Start dnsmasq in the calling thread's network namespace; returns its pid.

        dnsmasq's parent exits once the daemon is set up (or failed), so waiting for it is
        waiting for the pid file."""
        path = self.binary()
        if path is None:
            raise InternalError("unable to locate dnsmasq in path")
        # A dnsmasq killed by someone else (another implementation's last DEL, the OOM
        # killer) may still hold port 53 while it exits: its address is free again soon.
        deadline = time.monotonic() + ADDRESS_IN_USE_WAIT
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        while True:
            with contextlib.suppress(FileNotFoundError):
                self.fs.remove(str(files.pid_file))  # a stale file is not the new daemon's
            try:
                proc: Finished = self.procs.run_detached(
                    argv(path, files), env=env, timeout=START_TIMEOUT
                )
            except OSError as exc:  # TimeoutError too
                raise InternalError(f"dnsname error: dnsmasq failed: {exc}") from None
            if proc.returncode == 0 or "Address already in use" not in proc.output:
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if proc.returncode != 0:
            raise InternalError(f'dnsname error: dnsmasq failed with "{proc.output}"')
        pid = self.running_pid(files)
        if pid is None:
            why = proc.output or "no pid"
            raise InternalError(f"dnsname error: dnsmasq did not start ({why})")
        return pid

    def reload(self, files: NetworkFiles) -> int:
        """SIGHUP the running dnsmasq so it rereads the hosts file, or start one."""
        pid = self.running_pid(files)
        if pid is None:
            return self.start(files)
        self.procs.signal(pid, signal.SIGHUP)
        return pid

    def stop(self, files: NetworkFiles) -> int | None:
        """Kill this network's dnsmasq (SIGKILL, as the reference) and wait until it is gone."""
        pid = self.running_pid(files)
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            self.procs.signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_WAIT
        while time.monotonic() < deadline and self.procs.alive(pid):
            time.sleep(0.005)
        return pid
