"""A DaemonSet's pod spec run the way a kubelet runs it, with podman, on a simulated node.

A node here is three namespaces: its network namespace (from the playground cluster's
underlay, reaching etcd), a mount namespace in which a scratch root's directories are bound
over the host paths the manifest names (/opt/cni/bin, /etc/cni/net.d, /opt/pycni, /run/pycni,
/run/netns, /run/flannel, /var/lib/cni, /run/containerd), and a pid namespace whose pid 1 (the
holder) lives in that mount namespace, whose /proc is that pid namespace's (as a host's
/proc is the host's). hostNetwork is the node's network namespace, hostPID
its pid namespace, a hostPath its scratch directory; containerd runs inside the node's mount,
pid and network namespaces, so its plugin paths are the manifest's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["Node", "PodRunner"]

BOUND = (
    "opt/cni/bin", "etc/cni/net.d", "opt/pycni", "run/pycni", "run/netns", "run/flannel",
    "var/lib/cni", "run/containerd",
)  # fmt: skip
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
"""


def _run(argv: list[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


class Node:
    """The scratch root and the holder of one node's mount and pid namespaces."""

    def __init__(self, name: str, root: Path, netns: str) -> None:
        self.name, self.root, self.netns = name, root, netns
        self.created_mountpoints: list[Path] = []
        self.holder: subprocess.Popen[bytes] | None = None
        self.pid1 = 0  # the holder's pid as the machine sees it

    def start(self) -> None:
        binds = []
        for rel in BOUND:
            (self.root / rel).mkdir(parents=True, exist_ok=True)
            point = Path("/", rel)
            if not point.exists():  # a mount point on the machine: removed in stop()
                missing = [p for p in [point, *point.parents] if not p.exists()]
                point.mkdir(parents=True)
                self.created_mountpoints += missing
            binds.append(f"mount --bind {self.root / rel} /{rel}")
        script = " && ".join([*binds, "exec sleep 1000000"])
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
             "--mount-proc", "--", "sh", "-c", script],
            stderr=subprocess.DEVNULL,  # unshare's complaint when its pid 1 is killed at the end
        )  # fmt: skip
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kids = children.read_text().split() if children.exists() else []
            if kids and b"sleep" in Path(f"/proc/{kids[0]}/cmdline").read_bytes():
                self.pid1 = int(kids[0])
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: the namespace holder did not start")

    @property
    def mount_ns(self) -> str:
        return f"/proc/{self.pid1}/ns/mnt"

    @property
    def pid_ns(self) -> str:
        return f"/proc/{self.pid1}/ns/pid"

    def inside(self, *argv: str) -> list[str]:
        """``argv`` run as a process of the node: its mount, pid and network namespaces."""
        return [
            "nsenter", f"--mount={self.mount_ns}", f"--pid={self.pid_ns}", f"--net={self.netns}",
            "--", *argv,
        ]  # fmt: skip

    def files(self) -> list[str]:
        """Every file and link under the scratch root (directories left out)."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if not p.is_dir())

    def stop(self) -> None:
        if self.holder is not None:
            if self.pid1:
                os.kill(self.pid1, signal.SIGKILL)  # pid 1: its whole pid namespace goes
            self.holder.wait(timeout=30)
            self.holder = None
        for point in sorted(self.created_mountpoints, key=lambda p: len(str(p)), reverse=True):
            with contextlib.suppress(OSError):
                point.rmdir()


class PodRunner:
    """`podman run` for each container of a pod spec, as the kubelet would start it."""

    def __init__(self, home: Path, image: str, objects: list[dict[str, Any]]) -> None:
        self.home, self.image = home, image
        self.conf = home / "containers.conf"
        self.conf.write_text(CONTAINERS_CONF)
        self.objects = objects
        self.started: list[str] = []

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, CONTAINERS_CONF=str(self.conf))
        return _run(["podman", *args], timeout=timeout, env=env)

    def _object(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found

    def _env(self, container: dict[str, Any]) -> list[str]:
        out = []
        for env in container.get("env", []):
            if "value" in env:
                value = env["value"]
            elif "secretKeyRef" in env["valueFrom"]:
                ref = env["valueFrom"]["secretKeyRef"]
                value = self._object("Secret", ref["name"])["stringData"][ref["key"]]
            else:
                ref = env["valueFrom"]["configMapKeyRef"]
                value = self._object("ConfigMap", ref["name"])["data"][ref["key"]]
            out += ["--env", f"{env['name']}={value}"]
        return out

    def _volume_source(self, node: Node, volume: dict[str, Any]) -> Path:
        if "hostPath" in volume:
            host = volume["hostPath"]
            path = node.root / host["path"].lstrip("/")
            if host.get("type") == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            elif host.get("type") == "FileOrCreate" and not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            return path
        if "configMap" in volume:  # the kubelet projects each key as a file
            data = self._object("ConfigMap", volume["configMap"]["name"])["data"]
            path = self.home / "kubelet" / node.name / "configmaps" / volume["name"]
            path.mkdir(parents=True, exist_ok=True)
            for key, text in data.items():
                (path / key).write_text(text)
            return path
        raise AssertionError(f"volume kind not mapped: {volume}")

    def argv(self, node: Node, pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
        """The `podman run` arguments for ``container`` of ``pod`` on ``node``."""
        name = f"{node.name}-{container['name']}"
        out = ["run", "--name", name, "--hostname", node.name]
        if pod.get("hostNetwork"):
            out += ["--network", f"ns:{node.netns}"]
        if pod.get("hostPID"):
            out += ["--pid", f"ns:{node.pid_ns}"]
        context = container.get("securityContext", {})
        if context.get("privileged"):
            out.append("--privileged")
        caps = context.get("capabilities", {})
        out += [f"--cap-drop={c}" for c in caps.get("drop", [])]
        out += [f"--cap-add={c}" for c in caps.get("add", [])]
        out += self._env(container)
        volumes = {v["name"]: v for v in pod["volumes"]}
        propagation = {"HostToContainer": ",rslave", "Bidirectional": ",rshared"}
        for mount in container.get("volumeMounts", []):
            source = self._volume_source(node, volumes[mount["name"]])
            mode = "ro" if mount.get("readOnly") else "rw"
            mode += propagation.get(mount.get("mountPropagation", "None"), "")
            out += ["-v", f"{source}:{mount['mountPath']}:{mode}"]
        if "command" in container:
            out += ["--entrypoint", json.dumps(container["command"])]
        return [*out, container["image"], *container.get("args", [])]

    def run_init(self, node: Node, pod: dict[str, Any], container: dict[str, Any]) -> str:
        """An init container: to completion, exit 0 (else the kubelet would retry it)."""
        argv = self.argv(node, pod, container)
        proc = self.podman(*argv[:1], "--rm", *argv[1:], timeout=300)
        assert proc.returncode == 0, f"{container['name']} on {node.name}:\n{proc.stderr}"
        return proc.stdout

    def start(self, node: Node, pod: dict[str, Any], container: dict[str, Any]) -> str:
        argv = self.argv(node, pod, container)
        proc = self.podman(*argv[:1], "-d", *argv[1:])
        assert proc.returncode == 0, f"{container['name']} on {node.name}:\n{proc.stderr}"
        self.started.append(f"{node.name}-{container['name']}")
        return self.started[-1]

    def pid(self, name: str) -> int:
        proc = self.podman("inspect", "--format", "{{.State.Pid}}", name)
        return int(proc.stdout.strip() or 0)

    def logs(self, name: str) -> str:
        proc = self.podman("logs", name)
        return proc.stdout + proc.stderr

    def remove_all(self) -> None:
        """What deleting the DaemonSet does to its pods: stop (SIGTERM, grace) and remove."""
        for name in reversed(self.started):
            self.podman("rm", "-f", "-t", "10", name)
        self.started.clear()
