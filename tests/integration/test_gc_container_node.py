"""GC on a node whose runtime runs in a container (issue #32 item 4): a privileged podman
container is the node (kind, k3d and minikube's docker driver run containerd like this), with
its own mount, PID and network namespaces and /run/netns inside it.

Pods are made from inside it; one is live in /run/netns, one is held only by a process after
`ip netns del` (a pod the runtime's list forgot), and dead ones are really gone.  The plugins'
GC verb (through libcni, with the runtime's list) and the node-wide `pycni gc` run inside it:
both succeed, free the dead pods and keep the live ones.  The reference simply succeeds there;
pycni used to refuse outright (999, exit 4: "a PID namespace of its own").

The container's root is an empty directory with the machine's /usr, /etc, Python and this
source tree bind-mounted read-only: no image, no registry.  Its pods, bridge and state live
and die with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
tmp_dir = "{tmp_dir}"
"""

# Runs inside the node: one step of the scenario per call, state in /var/lib/cni.
NODE_SCRIPT = """
import json, os, subprocess, sys
from pycni.entrypoints import install
from pycni.runtime.api import CNIConfig
from pycni.runtime.types import GCArgs, GCAttachment, RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from pycni.spec.errors import CNIError

CNI_PATH, NET_D, CACHE = "/tmp/cni/bin", "/tmp/cni/net.d", "/var/lib/cni"
RAW = json.dumps({"cniVersion": "1.1.0", "name": "gcnode", "plugins": [{
    "type": "bridge", "bridge": "gcnode0", "isGateway": True,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.213.88.0/24"}]]}}]}).encode()
step, args = sys.argv[1], sys.argv[2:]
cni = CNIConfig([CNI_PATH], cache_dir=CACHE)
conf = conf_list_from_bytes(RAW)
if step == "setup":
    os.makedirs(CNI_PATH, exist_ok=True)
    os.makedirs(NET_D, exist_ok=True)
    install.install(CNI_PATH, form="inprocess")
    with open(os.path.join(NET_D, "10-gcnode.conflist"), "wb") as f:
        f.write(RAW)
elif step == "add":
    (pod,) = args
    subprocess.run(["ip", "netns", "add", pod], check=True)
    result = cni.add_network_list(conf, RuntimeConf(pod, f"/run/netns/{pod}", "eth0"))
    print(str(result.ips[0].address).split("/")[0])
elif step == "forget":  # as a runtime that keeps no cache: libcni's GC will not DEL it
    (pod,) = args
    os.unlink(os.path.join(CACHE, "results", f"gcnode-{pod}-eth0"))
elif step == "verb":
    valid = tuple(GCAttachment(pod, "eth0") for pod in args)
    try:
        cni.gc_network_list(conf, GCArgs(valid_attachments=valid))
    except CNIError as err:
        print(json.dumps({"code": err.code, "msg": err.msg}))
        sys.exit(1)
elif step == "owners":
    store = "/var/lib/cni/networks/gcnode"
    out = {}
    for name in os.listdir(store):
        if name[0].isdigit():
            with open(os.path.join(store, name)) as f:
                out[name] = f.read().splitlines()[0]
    print(json.dumps(out))
"""


class Node:
    """A privileged podman container standing for a node; ``run`` runs argv inside it."""

    def __init__(self, home: Path, python: str = sys.executable) -> None:
        """``python``: the interpreter of the pycni to run inside (its venv and source tree
        are bind-mounted too)."""
        self.home, self.python = home, python
        # podman refuses a run root longer than 50 characters: not under pytest's tmp
        self.runroot = Path(tempfile.mkdtemp(prefix="pcni-run-"))
        self.name = f"pycni-gcnode-{uuid.uuid4().hex[:8]}"
        (home / "tmp").mkdir(parents=True)
        (home / "containers.conf").write_text(CONTAINERS_CONF.format(tmp_dir=home / "tmp"))
        rootfs = home / "rootfs"
        for sub in ("usr", "etc", "tmp", "run", "var", "proc", "sys", "dev", "root"):
            (rootfs / sub).mkdir(parents=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            if Path(f"/{link}").is_symlink():
                (rootfs / link).symlink_to(os.readlink(f"/{link}").lstrip("/"))
        venv = Path(python).parent.parent
        base = Path(os.path.realpath(python)).parent.parent
        binds = {"/usr", "/etc", str(REPO), str(venv), str(venv.parent), str(base)}
        self.podman(
            "run", "-d", "--name", self.name, "--privileged", "--network", "none",
            "--tmpfs", "/run", "--tmpfs", "/tmp", "--tmpfs", "/var",
            *(arg for path in sorted(binds) for arg in ("-v", f"{path}:{path}:ro")),
            "--rootfs", str(rootfs), "/usr/bin/sleep", "3600",
        )  # fmt: skip

    def podman(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run(
            [
                "podman",
                "--root",
                str(self.home / "storage"),
                "--runroot",
                str(self.runroot),
                "--storage-driver",
                "vfs",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, CONTAINERS_CONF=str(self.home / "containers.conf")),
        )
        assert proc.returncode == 0, f"podman {args[0]}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = ["--env", "NETCONFPATH=/tmp/cni/net.d", "--env", "CNI_PATH=/tmp/cni/bin"]
        proc = subprocess.run(
            [
                "podman",
                "--root",
                str(self.home / "storage"),
                "--runroot",
                str(self.runroot),
                "--storage-driver",
                "vfs",
                "exec",
                *env,
                self.name,
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, CONTAINERS_CONF=str(self.home / "containers.conf")),
        )
        if check:
            assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        return proc

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(self.python, "-c", NODE_SCRIPT, *args, check=check)

    def owners(self) -> dict[str, str]:
        found: dict[str, str] = json.loads(self.script("owners").stdout)
        return found

    def links(self) -> set[str]:
        items: list[dict[str, Any]] = json.loads(self.run("ip", "-j", "link", "show").stdout)
        return {str(item["ifname"]) for item in items}

    def close(self) -> None:
        try:
            self.podman("rm", "-f", "-t", "0", self.name)
        finally:
            shutil.rmtree(self.runroot, ignore_errors=True)


@pytest.fixture
def container_node(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path / "podman")
    try:
        node.script("setup")
        yield node
    finally:
        node.close()


def _wait_veths(node: Node, count: int) -> None:
    """Until the node has ``count`` veths: a dead pod's goes with its namespace, which the
    kernel destroys lazily."""
    deadline = time.monotonic() + 30
    while len([name for name in node.links() if name.startswith("veth")]) != count:
        assert time.monotonic() < deadline, f"the node never got to {count} veths"
        time.sleep(0.05)


def test_gc_inside_a_privileged_podman_node_keeps_live_pods_and_frees_dead_ones(
    container_node: Node,
) -> None:
    node = container_node
    ip = {pod: node.script("add", pod).stdout.strip() for pod in ("live", "held", "dead1")}
    # "held": a process keeps it after `ip netns del`; no cache or list has it, only the scan
    node.script("forget", "held")
    node.script("forget", "dead1")  # freed by host-local's GC verb itself, not by a DEL
    node.run(
        "sh",
        "-c",
        "ip netns exec held sleep 3600 >/dev/null 2>&1 & i=0; "  # until it is in there
        'while [ -z "$(ip netns pids held)" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done',
    )
    assert node.run("ip", "netns", "pids", "held").stdout.strip(), "the holder never started"
    node.run("ip", "netns", "del", "held")
    node.run("ip", "netns", "del", "dead1")
    _wait_veths(node, 2)
    assert node.owners() == {ip["live"]: "live", ip["held"]: "held", ip["dead1"]: "dead1"}

    # GC through libcni with the runtime's list (only "live"): host-local's GC verb frees
    # the dead pod's address and keeps the held one's, which a live namespace of this node
    # has.
    verb = node.script("verb", "live", check=False)
    assert verb.returncode == 0, verb.stdout + verb.stderr
    assert node.owners() == {ip["live"]: "live", ip["held"]: "held"}

    # The node-wide `pycni gc` (no list: what is proven gone) frees a cached dead pod.
    ip["dead2"] = node.script("add", "dead2").stdout.strip()
    node.run("ip", "netns", "del", "dead2")
    _wait_veths(node, 2)
    proc = node.run(
        str(Path(node.python).parent / "pycni"),
        "gc",
        "--cache-dir",
        "/var/lib/cni",
        "--grace-period",
        "0",
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DEL gcnode dead2 eth0" in proc.stdout, proc.stdout
    assert node.owners() == {ip["live"]: "live", ip["held"]: "held"}
    shown = node.run("ip", "netns", "exec", "live", "ip", "-4", "-o", "addr", "show", "eth0")
    assert f"inet {ip['live']}/" in shown.stdout
    _wait_veths(node, 2)  # both live pods kept their host veths
