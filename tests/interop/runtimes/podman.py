"""podman 4 with its CNI backend, with every piece of state under one temp directory.

The settings this machine needs (see docs/podman.md): runc and cgroupfs (hybrid cgroups, no
systemd), explicit ulimits (no CAP_SYS_RESOURCE), file events, and the CNI backend pointed at a
plugin directory and a private network config directory. Storage root, run root and libpod's
tmp dir are private too; only the CNI result cache and host-local's default data dir are
podman's fixed /var/lib/cni, which the test module restores afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.interop.runtimes.image import IMAGE_NAME

CONTAINERS_CONF = """\
[containers]
netns = "bridge"
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
tmp_dir = "{tmp_dir}"

[network]
network_backend = "cni"
cni_plugin_dirs = ["{plugin_dir}"]
network_config_dir = "{config_dir}"
"""


class PodmanError(AssertionError):
    pass


@dataclass
class Podman:
    """One podman "installation" in ``home`` using the CNI plugins in ``plugin_dir``."""

    home: Path
    plugin_dir: Path
    networks: list[str] = field(default_factory=list)
    # podman refuses a run root longer than 50 characters, so it cannot live under pytest's tmp
    runroot: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pcni-run-")))

    def __post_init__(self) -> None:
        for sub in ("storage", "tmp", "net.d"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            CONTAINERS_CONF.format(
                tmp_dir=self.home / "tmp",
                plugin_dir=self.plugin_dir,
                config_dir=self.config_dir,
            )
        )

    @property
    def conf(self) -> Path:
        return self.home / "containers.conf"

    @property
    def config_dir(self) -> Path:
        return self.home / "net.d"

    def argv(self, *args: str) -> list[str]:
        return [
            "podman",
            "--root",
            str(self.home / "storage"),
            "--runroot",
            str(self.runroot),
            "--storage-driver",
            "overlay",
            *args,
        ]

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        env = dict(os.environ, CONTAINERS_CONF=str(self.conf))
        proc = subprocess.run(
            self.argv(*args), capture_output=True, text=True, env=env, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise PodmanError(
                f"podman {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        return proc.stdout

    def timed(self, *args: str) -> float:
        """Run a podman command and return its wall time in ms."""
        start = time.perf_counter()
        self.run(*args)
        return (time.perf_counter() - start) * 1000

    def load_image(self, archive: Path) -> None:
        self.run("load", "-q", "-i", str(archive))

    def create_network(
        self, name: str, subnet: str, bridge: str, dns: bool = False
    ) -> dict[str, object]:
        """``podman network create``, then give the bridge a name unique to this test run.

        podman 4.3 has no option for the bridge name with the CNI backend (it picks the next
        free ``cni-podmanN``); the conflist it wrote is otherwise used exactly as written.
        With ``dns`` podman adds the dnsname plugin (when the plugin dir has one); without it
        ``--disable-dns`` keeps the chain at bridge, portmap, firewall and tuning.
        """
        self.run(
            "network", "create", "--subnet", subnet, *(() if dns else ("--disable-dns",)), name
        )
        self.networks.append(name)
        path = self.config_dir / f"{name}.conflist"
        conflist = json.loads(path.read_text())
        conflist["plugins"][0]["bridge"] = bridge
        path.write_text(json.dumps(conflist, indent=3))
        return dict(conflist)

    def start_httpd(self, name: str, network: str, *extra: str) -> str:
        return self.run(
            "run", "-d", "--name", name, "--network", network, *extra,
            IMAGE_NAME, "httpd", "-f", "-p", "80", "-h", "/www",
        ).strip()  # fmt: skip

    def address(self, container: str, network: str) -> str:
        data = json.loads(self.run("inspect", container))
        return str(data[0]["NetworkSettings"]["Networks"][network]["IPAddress"])

    def remove(self, *containers: str) -> None:
        self.run("rm", "-f", "-t", "0", *containers)

    def close(self) -> None:
        """Remove every container, network and image this instance made."""
        self.run("rm", "-a", "-f", "-t", "0", check=False)
        for name in self.networks:
            self.run("network", "rm", "-f", name, check=False)
        self.run("rmi", "-a", "-f", check=False)
        shutil.rmtree(self.runroot, ignore_errors=True)
