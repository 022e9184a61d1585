"""One network's dnsmasq: start it, reload it (SIGHUP), stop it, and tell whether it runs.

dnsmasq daemonizes itself and writes the pid file named in its config; we only ever signal a
pid read from that file after /proc shows it is a dnsmasq started with *this* network's
``--conf-file`` (the reference signals whatever pid the file holds, so a stale file could make
it kill an unrelated process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from pycni.net import tools
from pycni.plugins.meta.dnsname.files import NetworkFiles
from pycni.spec.errors import InternalError

BINARY = "dnsmasq"
START_TIMEOUT = 30.0
STOP_WAIT = 2.0


def binary() -> str | None:
    """dnsmasq as found in the caller's PATH (the reference's exec.LookPath)."""
    return tools.which(BINARY)


def argv(binary_path: str, files: NetworkFiles) -> list[str]:
    """The reference's command line."""
    return [binary_path, "-u", "root", f"--conf-file={files.conf}"]


def read_pid(files: NetworkFiles) -> int | None:
    try:
        text = files.pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def serves(pid: int, files: NetworkFiles) -> bool:
    """``pid`` is a live dnsmasq started with this network's config file."""
    args = _cmdline(pid)
    return (
        bool(args)
        and os.path.basename(args[0]) == BINARY
        and f"--conf-file={files.conf}" in args[1:]
        and not _is_zombie(pid)
    )


def running_pid(files: NetworkFiles) -> int | None:
    """The pid of this network's dnsmasq when it runs, else None."""
    pid = read_pid(files)
    return pid if pid is not None and serves(pid, files) else None


ADDRESS_IN_USE_WAIT = 2.0  # seconds of retrying a start whose address is still held


def start(files: NetworkFiles) -> int:
    """Start dnsmasq in the calling thread's network namespace; returns its pid.

    dnsmasq's parent exits once the daemon is set up (or failed), so waiting for it is
    waiting for the pid file."""
    path = binary()
    if path is None:
        raise InternalError("unable to locate dnsmasq in path")
    # A dnsmasq killed by someone else (another implementation's last DEL, the OOM killer) may
    # still hold port 53 while it exits: its address is free again within moments.
    deadline = time.monotonic() + ADDRESS_IN_USE_WAIT
    while True:
        with contextlib.suppress(FileNotFoundError):
            files.pid_file.unlink()  # a stale file must not be mistaken for the new daemon's
        try:
            proc = subprocess.run(
                argv(path, files),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=START_TIMEOUT,
                check=False,
                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InternalError(f"dnsname error: dnsmasq failed: {exc}") from None
        output = proc.stdout.decode(errors="replace").strip()
        if proc.returncode == 0 or "Address already in use" not in output:
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if proc.returncode != 0:
        raise InternalError(f'dnsname error: dnsmasq failed with "{output}"')
    pid = running_pid(files)
    if pid is None:
        raise InternalError(f"dnsname error: dnsmasq did not start ({output or 'no pid'})")
    return pid


def reload(files: NetworkFiles) -> int:
    """SIGHUP the running dnsmasq so it rereads the hosts file, or start one."""
    pid = running_pid(files)
    if pid is None:
        return start(files)
    os.kill(pid, signal.SIGHUP)
    return pid


def stop(files: NetworkFiles) -> int | None:
    """Kill this network's dnsmasq (SIGKILL, as the reference) and wait until it is gone."""
    pid = running_pid(files)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline and not _is_zombie(pid):
        time.sleep(0.005)
    return pid
