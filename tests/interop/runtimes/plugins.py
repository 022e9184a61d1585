"""The three plugin sets a runtime is pointed at: the Go reference plugins, pycni's in-process
entry points, and pycni's fast forwarders talking to a warm daemon on a private socket."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GO_PLUGINS = Path("/usr/lib/cni")
KINDS = ("go", "inprocess", "daemon")
PYCNI_KINDS = ("inprocess", "daemon")
LOG_ARGS = ("--log-level", "WARNING")


@dataclass
class PluginSet:
    kind: str
    directory: Path
    socket: Path | None = None

    def daemon_calls(self) -> int:
        """How many plugin calls the daemon has served (0 for the other kinds)."""
        if self.socket is None:
            return 0
        from pycni.daemon import client

        return int(client.stats(str(self.socket))["counts"]["calls"])


@contextmanager
def plugin_set(kind: str, scratch: Path) -> Iterator[PluginSet]:
    """Install (and for "daemon", serve) one plugin set for the duration of the block."""
    if kind == "go":
        assert (GO_PLUGINS / "bridge").exists(), "containernetworking-plugins is not installed"
        yield PluginSet(kind, GO_PLUGINS)
        return
    from pycni.entrypoints import install

    directory = scratch / f"plugins-{kind}"
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "inprocess":
        install.install(directory, form="inprocess")
        yield PluginSet(kind, directory)
        return
    assert kind == "daemon", kind
    sock = scratch / "pycni.sock"
    install.install(directory, form="auto", socket_path=str(sock))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", str(sock), *LOG_ARGS]
    )
    try:
        deadline = time.monotonic() + 60  # its imports take seconds under load
        while not os.path.exists(sock) and time.monotonic() < deadline:
            assert daemon.poll() is None, "the pycni daemon exited at start"
            time.sleep(0.05)
        assert os.path.exists(sock), "the pycni daemon did not create its socket"
        yield PluginSet(kind, directory, sock)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
