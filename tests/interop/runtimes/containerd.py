"""A private containerd 1.6 with its CRI plugin, all state in temp dirs, stopped by its pid.

Settings this machine needs (see docs/containerd.md): ``restrict_oom_score_adj`` (no
CAP_SYS_RESOURCE), runc with ``SystemdCgroup = false`` (no systemd), and a sandbox image that is
already imported (no registry). The CNI section points at the plugin set under test and a
private conf dir. Two paths are containerd's own and not configurable in 1.6: the pinned pod
namespaces under /run/netns (removed with the sandbox) and the CNI result cache in /var/lib/cni.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.interop.runtimes.cri import CRIClient
from tests.interop.runtimes.image import IMAGE_NAME

CONFIG = """\
version = 2
root = "{root}"
state = "{state}"
oom_score = 0

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{ttrpc}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{runc_root}"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{bin_dir}"
  conf_dir = "{conf_dir}"
  max_conf_num = 1
"""

SHIM_RUN_DIR = Path("/run/containerd")
DISABLED = [
    f"io.containerd.snapshotter.v1.{name}" for name in ("btrfs", "zfs", "devmapper", "aufs")
]


@dataclass
class Containerd:
    home: Path
    bin_dir: Path
    # unix socket paths are limited to 108 bytes: keep the state dir short, outside pytest's tmp
    short: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pcni-ctd-")))
    process: subprocess.Popen[bytes] | None = None
    # the shim sockets' dir (/run/containerd/s) is fixed in 1.6; removed after if it was new
    run_dir_existed: bool = field(default_factory=lambda: SHIM_RUN_DIR.exists())

    @property
    def socket(self) -> Path:
        return self.short / "containerd.sock"

    @property
    def conf_dir(self) -> Path:
        return self.home / "net.d"

    @property
    def log(self) -> Path:
        return self.home / "containerd.log"

    def write_config(self) -> Path:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        text = CONFIG.format(
            root=self.home / "root",
            state=self.short / "state",
            socket=self.socket,
            ttrpc=self.short / "ttrpc.sock",
            runc_root=self.short / "runc",
            opt=self.home / "opt",
            image=IMAGE_NAME,
            bin_dir=self.bin_dir,
            conf_dir=self.conf_dir,
        )
        path = self.home / "config.toml"
        # disabled_plugins is a top-level key: it must come before the first table
        head, tables = text.split("\n[", 1)
        path.write_text(
            head + f"\ndisabled_plugins = {DISABLED!r}\n".replace("'", '"') + "\n[" + tables
        )
        return path

    def start(self) -> CRIClient:
        config = self.write_config()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                ["containerd", "--config", str(config), "--log-level", "warn"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = CRIClient(self.socket)
        try:
            client.wait_ready()
        except Exception as exc:
            raise AssertionError(f"containerd did not start:\n{self.log.read_text()}") from exc
        return client

    def ctr(self, *args: str) -> str:
        proc = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"ctr {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))
        # the CRI learns of images through events; wait until it lists ours
        deadline = time.monotonic() + 30
        while IMAGE_NAME not in self.ctr("images", "list", "-q"):
            assert time.monotonic() < deadline, "the imported image did not appear"
            time.sleep(0.1)

    def stop(self, client: CRIClient | None) -> None:
        """Remove every sandbox, then stop containerd by its pid and drop its state."""
        if client is not None:
            try:
                for sandbox_id in client.sandbox_ids():
                    client.stop_pod_sandbox(sandbox_id)
                    client.remove_pod_sandbox(sandbox_id)
            finally:
                client.close()
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        _unmount_under(self.home)
        _unmount_under(self.short)
        shutil.rmtree(self.short, ignore_errors=True)
        shutil.rmtree(self.home / "root", ignore_errors=True)
        if not self.run_dir_existed:
            shutil.rmtree(SHIM_RUN_DIR, ignore_errors=True)


def _unmount_under(path: Path) -> None:
    """Lazily unmount anything containerd left mounted below ``path`` (deepest first)."""
    mounts = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(path))
    ]
    for target in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
