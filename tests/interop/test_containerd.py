"""containerd 1.6's CRI on pycni's plugins, driven like a kubelet through our own gRPC client.

Each plugin set (Go reference, pycni in-process, pycni daemon) gets its own containerd (config,
root, state and sockets in temp dirs), its own conflist (bridge with host-local + portmap, the
chain a Kubernetes node typically uses), bridge name, subnet and host-local data dir. The pod
host side is the machine's own namespace, so the module snapshots it and removes what the
plugins left (iptables chains, nft tables, /var/lib/cni, ip_forward) afterwards.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.interop.runtimes import hostnet, timings
from tests.interop.runtimes.containerd import Containerd
from tests.interop.runtimes.cri import CRIClient, Sandbox
from tests.interop.runtimes.hostnet import RootSnapshot
from tests.interop.runtimes.image import IMAGE_NAME, INDEX_HTML
from tests.interop.runtimes.plugins import KINDS, PluginSet, plugin_set

pytestmark = [pytest.mark.kernel, pytest.mark.interop, pytest.mark.slow]

RUN_ID = os.getpid() % 10000
BRIDGE_PREFIX = f"pcct{RUN_ID}"
LOOP_SANDBOXES = 10  # 20 took twice as long and checked the same things
HTTPD = ["/bin/httpd", "-f", "-p", "80", "-h", "/www"]


@dataclass
class Setup:
    plugins: PluginSet
    containerd: Containerd
    cri: CRIClient
    network: str
    bridge: str
    data_dir: Path

    @property
    def label(self) -> str:
        return "Go" if self.plugins.kind == "go" else f"pycni {self.plugins.kind}"

    def reservations(self) -> list[str]:
        d = self.data_dir / self.network
        if not d.exists():
            return []
        return sorted(p.name for p in d.iterdir() if p.name[0].isdigit())

    def run_pod(self, name: str, host_port: int | None = None) -> Sandbox:
        ports = [(80, host_port)] if host_port else []
        config = self.cri.sandbox_config(name, uuid.uuid4().hex, ports)
        return self.cri.run_pod_sandbox(config)


def conflist(network: str, bridge: str, subnet: str, data_dir: Path) -> dict[str, object]:
    return {
        "cniVersion": "1.0.0",
        "name": network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(data_dir),
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


@pytest.fixture(scope="module", params=KINDS)
def setup(
    request: pytest.FixtureRequest,
    root_state: RootSnapshot,
    image: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    kind = str(request.param)
    index = KINDS.index(kind)
    timings.report_at_end(request.config)
    scratch = tmp_path_factory.mktemp(f"containerd-{kind}")
    network = f"pcct{RUN_ID}{kind}"
    bridge = f"{BRIDGE_PREFIX}{index}"
    data_dir = scratch / "host-local"
    with plugin_set(kind, scratch) as plugins:
        containerd = Containerd(scratch / "containerd", plugins.directory)
        containerd.conf_dir.mkdir(parents=True)
        config = conflist(network, bridge, f"10.123.{50 + index}.0/24", data_dir)
        (containerd.conf_dir / "10-pycni.conflist").write_text(json.dumps(config, indent=2))
        client = None
        try:
            client = containerd.start()
            containerd.import_image(image)
            yield Setup(plugins, containerd, client, network, bridge, data_dir)
        finally:
            containerd.stop(client)
    assert hostnet.cached_results(network) == []


def test_hostport_pod_answers_and_stop_releases_everything(setup: Setup) -> None:
    port = hostnet.free_port()
    calls_before = setup.plugins.daemon_calls()
    sandbox = setup.run_pod("web", port)
    try:
        ip = setup.cri.pod_ip(sandbox)
        assert ip.startswith("10.123.")
        assert setup.reservations() == [ip]
        assert len(hostnet.cached_results(setup.network)) == 1
        assert len(hostnet.bridge_ports(setup.bridge)) == 1
        setup.cri.start_container(sandbox, "httpd", IMAGE_NAME, HTTPD)
        assert hostnet.http_get("127.0.0.1", port) == INDEX_HTML.decode()
        assert hostnet.http_get(hostnet.node_address(), port) == INDEX_HTML.decode()
        assert hostnet.http_get(ip, 80) == INDEX_HTML.decode()
    finally:
        setup.cri.stop_pod_sandbox(sandbox.id)
    assert setup.reservations() == [], "StopPodSandbox did not release the address"
    assert hostnet.cached_results(setup.network) == []
    assert hostnet.bridge_ports(setup.bridge) == []
    with pytest.raises(AssertionError, match="did not answer"):
        hostnet.http_get("127.0.0.1", port, timeout=0.5, attempts=1)
    setup.cri.remove_pod_sandbox(sandbox.id)
    assert sandbox.id not in setup.cri.sandbox_ids()
    with pytest.raises(grpc.RpcError) as info:
        setup.cri.pod_ip(sandbox)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    if setup.plugins.kind == "daemon":
        # loopback, bridge (+ host-local in the same call), portmap: ADD, then DEL
        assert setup.plugins.daemon_calls() - calls_before >= 6, "the daemon was not used"


def test_ten_sandboxes_in_a_loop(setup: Setup) -> None:
    port = hostnet.free_port()
    warm = setup.run_pod("warm", port)
    setup.cri.stop_pod_sandbox(warm.id)
    setup.cri.remove_pod_sandbox(warm.id)
    rules_before = hostnet.firewall_state()
    for i in range(LOOP_SANDBOXES):
        start = time.perf_counter()
        sandbox = setup.run_pod(f"loop{i}", port)
        timings.record(f"CRI RunPodSandbox + hostPort ({setup.label})", since(start))
        assert len(setup.reservations()) == 1
        start = time.perf_counter()
        setup.cri.stop_pod_sandbox(sandbox.id)
        timings.record(f"CRI StopPodSandbox + hostPort ({setup.label})", since(start))
        setup.cri.remove_pod_sandbox(sandbox.id)
    assert setup.cri.sandbox_ids() == []
    assert setup.reservations() == []
    assert hostnet.cached_results(setup.network) == []
    assert hostnet.bridge_ports(setup.bridge) == []
    assert not [n for n in os.listdir("/run/netns") if n.startswith("cni-")], "pinned netns left"
    assert hostnet.firewall_state() == rules_before, "the sandboxes left firewall rules behind"


def since(start: float) -> float:
    return (time.perf_counter() - start) * 1000
