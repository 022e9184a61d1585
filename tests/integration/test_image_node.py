"""deploy/kubernetes/pycni.yaml run for real: the image built by scripts/build-image.sh, the
DaemonSet's pod spec turned into `podman run` calls as a kubelet would make them
(kubelet_podman.py) on two simulated nodes with etcd, then containerd's CRI on each node
starting pods through what install-cni put there, and those pods pinging each other across
the nodes over the agent's vxlan routes. The pods' ADD and DEL go through the daemon
container (it runs in the node's mount namespace: docs/kubernetes.md); with the daemon gone
an entry point runs its plugin in-process on the runtime install-cni copied. Removing the
containers and running the documented uninstall leaves the node roots empty.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pycni import playground
from pycni.playground import cluster
from tests.integration.cluster_helpers import wait_for
from tests.integration.kubelet_podman import Node, PodRunner
from tests.interop.runtimes.containerd import Containerd
from tests.interop.runtimes.cri import CRIClient
from tests.interop.runtimes.image import build_oci_archive

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    # the suite's daemon-mode pass would run the very same containers again
    pytest.mark.skipif(
        os.environ.get("PYCNI_TEST_MODE") == "daemon", reason="same test as in-process"
    ),
]

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy/kubernetes/pycni.yaml"
PREFIX = f"pcimg{os.getpid() % 1000}-"
SOCKET = "/run/pycni/pycni.sock"
TOOLS = ("buildah", "podman", "debootstrap", "containerd", "etcd", "unshare")


def _run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def node_image() -> str:
    """`make image`'s image (built once; an up-to-date one is reused)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (make setup-test)")
    started = time.monotonic()
    env = dict(os.environ, PY=sys.executable)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts/build-image.sh")],
        capture_output=True, text=True, timeout=1200, env=env, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"build-image.sh: {time.monotonic() - started:.1f} s")
    return proc.stdout.strip().splitlines()[-1]


class NodeContainerd(Containerd):
    """containerd inside a node's mount and network namespaces, on the manifest's paths."""

    node: Node

    @property
    def conf_dir(self) -> Path:
        return Path("/etc/cni/net.d")

    def start(self) -> CRIClient:
        config = self.write_config()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.node.inside("containerd", "--config", str(config), "--log-level", "warn"),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = CRIClient(self.socket)
        try:
            client.wait_ready()
        except Exception as exc:
            raise AssertionError(f"containerd did not start:\n{self.log.read_text()}") from exc
        return client

    def write_config(self) -> Path:
        (self.home).mkdir(parents=True, exist_ok=True)
        return super().write_config()


def manifest_objects(etcd_endpoint: str) -> list[dict[str, Any]]:
    """The manifest as an operator applies it: the Secret's etcd endpoint set to ours."""
    objects = [o for o in yaml.safe_load_all(MANIFEST.read_text()) if o]
    for o in objects:
        if o["kind"] == "Secret":
            o["stringData"]["etcd-endpoints"] = etcd_endpoint
    return objects


def agent_args(runner: PodRunner, container: dict[str, Any], net_conf: dict[str, Any]) -> None:
    """Until `pycni agent --net-conf` exists (branch k-netconf), the same settings as flags."""
    helps = runner.podman("run", "--rm", "--network", "none", runner.image, "agent", "--help")
    if "--net-conf" in helps.stdout:
        return
    backend = net_conf["Backend"]
    container["args"] = [
        "--network", net_conf["Network"], "--subnet-len", str(net_conf["SubnetLen"]),
        "--backend", backend["Type"], "--vni", str(backend.get("VNI", 1)),
    ]  # fmt: skip


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[cluster.ClusterState, list[Node]]]:
    state = cluster.new_state(str(tmp_path / "cluster"), PREFIX)
    os.makedirs(state.root, mode=0o700)
    nodes: list[Node] = []
    try:
        cluster.build_underlay(state, 2)
        cluster.start_etcd(state)
        for n in state.nodes:
            # a node booted with forwarding off (a new namespace inherits the machine's value,
            # which varies): the agent, not privileged, cannot turn it on; the first pod does
            _run("nsenter", f"--net={playground.netns_path(n.name)}", "sysctl", "-qw",
                 "net.ipv4.ip_forward=0")  # fmt: skip
            node = Node(n.name, tmp_path / n.name, playground.netns_path(n.name))
            nodes.append(node)
            node.start()
        yield state, nodes
    finally:
        for node in nodes:
            node.stop()
        cluster.down(state)


def _sandbox_pid(cri: CRIClient, sandbox_id: str) -> int:
    reply = cri.stub.PodSandboxStatus(
        cri.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True), timeout=30
    )
    return int(json.loads(reply.info["info"])["pid"])


def _pings(node: Node, from_pid: int, to_ip: str) -> bool:
    """Ping from the pod whose sandbox process is ``from_pid`` (a pid on ``node``)."""
    argv = node.inside("nsenter", f"--net=/proc/{from_pid}/ns/net", "busybox", "ping",
                       "-c", "1", "-W", "1", to_ip)  # fmt: skip
    return _run(*argv).returncode == 0


def test_the_daemonset_networks_cri_pods_across_two_nodes(
    node_image: str, two_nodes: tuple[cluster.ClusterState, list[Node]], tmp_path: Path
) -> None:
    state, nodes = two_nodes
    objects = manifest_objects(state.etcd_endpoint)
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    net_conf = json.loads(config["data"]["net-conf.json"])
    for c in pod["initContainers"] + pod["containers"]:
        c["image"] = node_image
    runner = PodRunner(tmp_path, node_image, objects)
    (agent,) = [c for c in pod["containers"] if c["name"] == "agent"]
    agent_args(runner, agent, net_conf)
    busybox = build_oci_archive(tmp_path / "busybox-oci.tar")
    runtimes: list[tuple[NodeContainerd, CRIClient | None]] = []
    try:
        started = time.monotonic()
        for node in nodes:
            for init in pod["initContainers"]:
                runner.run_init(node, pod, init)
        install_seconds = (time.monotonic() - started) / len(nodes)
        print(f"install-cni: {install_seconds:.2f} s per node")
        for node in nodes:
            assert (node.root / "etc/cni/net.d/10-pycni.conflist").exists()
            assert (node.root / "opt/cni/bin/flannel").read_bytes()[:4] == b"\x7fELF"
            assert os.readlink(node.root / "opt/pycni/current").startswith("releases/")
            again = runner.run_init(node, pod, pod["initContainers"][0])
            assert "everything already in place" in again  # idempotent
            for c in pod["containers"]:
                runner.start(node, pod, c)
        for node in nodes:
            subnet_env = node.root / "run/flannel/subnet.env"
            wait_for(subnet_env.exists, 60, f"{node.name}'s subnet.env",
                     lambda n=node: runner.logs(f"{n.name}-agent"))  # fmt: skip
            sock = node.root / "run/pycni/pycni.sock"
            wait_for(sock.exists, 60, f"{node.name}'s daemon socket",
                     lambda n=node: runner.logs(f"{n.name}-daemon"))  # fmt: skip
            # the daemon really is in the node's mount namespace (and serves its callers)
            daemon_pid = runner.pid(f"{node.name}-daemon")
            assert os.stat(f"/proc/{daemon_pid}/ns/mnt").st_ino == os.stat(node.mount_ns).st_ino
            (daemon,) = [c for c in pod["containers"] if c["name"] == "daemon"]
            probe = runner.podman(
                "exec", f"{node.name}-daemon", *daemon["livenessProbe"]["exec"]["command"]
            )
            assert probe.returncode == 0, probe.stdout + probe.stderr
            ready = runner.podman(
                "exec", f"{node.name}-agent", *agent["readinessProbe"]["exec"]["command"]
            )
            assert ready.returncode == 0, ready.stdout + ready.stderr
        for node in nodes:
            ctd = NodeContainerd(tmp_path / f"{node.name}-containerd", Path("/opt/cni/bin"))
            ctd.node = node
            runtimes.append((ctd, None))
            cri = ctd.start()
            runtimes[-1] = (ctd, cri)
            ctd.import_image(busybox)
        pods = []
        for ctd, cri in runtimes:
            assert cri is not None
            sandbox = cri.run_pod_sandbox(cri.sandbox_config(f"{ctd.node.name}-pod",
                                                             uuid.uuid4().hex))  # fmt: skip
            pods.append((cri.pod_ip(sandbox), _sandbox_pid(cri, sandbox.id)))
        (ip1, pid1), (ip2, pid2) = pods
        for node in nodes:
            said = runner.logs(f"{node.name}-agent")
            assert "warning: net.ipv4.ip_forward is off and cannot be set from here" in said
            forwarding = _run(*node.inside("cat", "/proc/sys/net/ipv4/ip_forward"))
            # turned on by the pod's bridge ADD (isGateway), in the daemon
            assert forwarding.stdout.strip() == "1"
        assert ip1.startswith("10.244.") and ip2.startswith("10.244.") and ip1 != ip2
        wait_for(lambda: _pings(nodes[0], pid1, ip2), 60, f"{ip1} -> {ip2} across the nodes")
        wait_for(lambda: _pings(nodes[1], pid2, ip1), 30, f"{ip2} -> {ip1} across the nodes")
        for node in nodes:
            pycni = str(Path(sys.executable).parent / "pycni")  # asked from the node itself
            stats = _run(*node.inside(pycni, "daemon", "--stats", "--socket", SOCKET))
            assert stats.returncode == 0, stats.stdout + stats.stderr
            served = json.loads(stats.stdout)
            calls = {(r["plugin_type"], r["command"]) for r in served["recent"]}
            # the pod's chain (containerd adds loopback) ran in the daemon, none was sent back
            assert {("loopback", "ADD"), ("flannel", "ADD"), ("portmap", "ADD")} <= calls
            assert served["counts"]["run_locally"] == 0 and served["counts"]["errors"] == 0
    finally:
        for ctd, cri in runtimes:
            ctd.stop(cri)  # the pods' DEL, through the daemon while it still runs
        runner.remove_all()
    for node in nodes:
        # no daemon now: the entry point runs the plugin in-process on the host's copy of the
        # runtime (its own loader, libc and Python under /opt/pycni)
        fallback = subprocess.run(
            node.inside("env", "-i", "CNI_COMMAND=VERSION", "/opt/cni/bin/loopback"),
            input='{"cniVersion": "1.0.0"}', capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert fallback.returncode == 0, fallback.stdout + fallback.stderr
        assert "1.0.0" in json.loads(fallback.stdout)["supportedVersions"]
        uninstall = runner.podman(
            "run", "--rm", "--network", "none",
            "-v", f"{node.root}/opt/cni/bin:/host/opt/cni/bin",
            "-v", f"{node.root}/etc/cni/net.d:/host/etc/cni/net.d",
            "-v", f"{node.root}/opt/pycni:/host/opt/pycni",
            "-v", f"{node.root}/run:/host/run",
            "-v", f"{node.root}/var/lib/cni:/host/var/lib/cni",
            node_image, "uninstall",
        )  # fmt: skip
        assert uninstall.returncode == 0, uninstall.stderr
        assert node.files() == ["run/xtables.lock"], node.files()
