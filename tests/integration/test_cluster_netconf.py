"""`pycni agent --net-conf` with flannel's net-conf.json on real nodes and a real etcd: the
file's VNI, Port, MTU, SubnetLen and SubnetMin/SubnetMax reach the kernel and the lease, the
subnet file carries flannel's keys (read by pycni's flannel plugin), and pods' traffic
crosses the overlay on the file's UDP port. A refused file starts nothing."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycni import playground
from pycni.cluster.lease import LeaseStore
from pycni.cluster.subnet import SubnetEnv, readiness
from pycni.playground import cluster
from tests import harness
from tests.integration.cluster_helpers import MARKS, PlaygroundCluster, pycni, wait_for

pytestmark = MARKS

NET_CONF = {
    "Network": "10.246.0.0/16",
    "SubnetLen": 26,
    "SubnetMin": "10.246.4.0",
    "SubnetMax": "10.246.5.192",
    "EnableNFTables": False,
    "Backend": {"Type": "vxlan", "VNI": 42, "Port": 4790, "MTU": 1400, "GBP": False},
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlaygroundCluster]:
    root = tmp_path_factory.mktemp("cluster-netconf") / "state"
    c = PlaygroundCluster("vxlan", root, f"{harness.RUN_PREFIX}nc-")
    proc = pycni(
        "cluster", "--state-dir", str(root), "up", "--nodes", "1", "--pods-per-node", "0",
        "--backend", "vxlan", "--prefix", c.prefix,
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield c
    finally:
        if not c.is_down:
            c.down()


def _node(state: cluster.ClusterState, name: str, address: str) -> harness.Namespace:
    """A node namespace on the cluster's underlay bridge (eth0 = ``address``/24)."""
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    peer = f"k{name[-1]}"
    batch = (
        f"link add {peer} type veth peer name eth0 netns {name}\nlink set {peer} master br0 up\n"
    )
    subprocess.run(["ip", "-n", state.underlay_ns, "-batch", "-"], input=batch.encode(), check=True)
    node = f"addr add {address}/24 dev eth0\nlink set eth0 up\nlink set lo up\n"
    subprocess.run(["ip", "-n", name, "-batch", "-"], input=node.encode(), check=True)
    return harness.Namespace(name)


def _ready(path: str) -> SubnetEnv:
    """The subnet file as the flannel plugin takes it (ready, and parsed)."""
    state = readiness(path)
    assert state.ready and state.env is not None, state.reason
    return state.env


def _agent(namespace: str, endpoint: str, prefix: str, conf: Path, file: Path) -> list[str]:
    return [
        "nsenter", f"--net={playground.netns_path(namespace)}", "--",
        sys.executable, "-m", cluster.AGENT_MARKER,
        "--etcd-endpoints", endpoint, "--etcd-prefix", prefix, "--net-conf", str(conf),
        "--iface", "eth0", "--subnet-file", str(file), "--ttl", "30", "--no-ipmasq",
    ]  # fmt: skip


def test_flannels_net_conf_drives_lease_device_subnet_file_and_data_path(
    up: PlaygroundCluster, tmp_path: Path
) -> None:
    state = up.state()
    prefix = f"/netconf-{os.getpid()}"
    names = [f"{up.prefix}k1", f"{up.prefix}k2"]
    conf = tmp_path / "net-conf.json"
    conf.write_text(json.dumps(NET_CONF))
    files = [tmp_path / "k1.env", tmp_path / "k2.env"]
    log = tmp_path / "agents.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        nodes = [
            _node(state, n, a) for n, a in zip(names, ["10.99.0.201", "10.99.0.202"], strict=True)
        ]
        # a refused file: exit 2 naming the option, nothing made in the node, nothing in etcd
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**NET_CONF, "Backend": {"Type": "vxlan", "Learning": True}}))
        refused = subprocess.run(
            _agent(names[0], state.etcd_endpoint, prefix, bad, files[0]),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode == 2 and "Backend.Learning" in refused.stderr, refused.stderr
        assert set(nodes[0].links()) == {"lo", "eth0"} and not files[0].exists()
        assert state.etcd().get_prefix(prefix)[0] == []

        with log.open("wb") as out:
            procs = [
                subprocess.Popen(
                    _agent(n, state.etcd_endpoint, prefix, conf, f), stdout=out, stderr=out
                )
                for n, f in zip(names, files, strict=True)
            ]
        wait_for(lambda: all(f.exists() for f in files), 60, "both subnet files", log.read_text)
        assert [p.poll() for p in procs] == [None, None], log.read_text()

        # the subnet file: flannel's keys, what flannel's CNI plugin reads (and pycni's)
        keys = [line.split("=", 1)[0] for line in files[0].read_text().splitlines()]
        assert keys == [
            "FLANNEL_NETWORK",
            "FLANNEL_SUBNET",
            "FLANNEL_MTU",
            "FLANNEL_IPMASQ",
            "PYCNI_FRESH_FOR",
        ]
        envs = [_ready(str(f)) for f in files]
        low, high = ipaddress.ip_network("10.246.4.0/26"), ipaddress.ip_network("10.246.5.192/26")
        for env in envs:
            assert str(env.network) == "10.246.0.0/16" and env.subnet is not None
            assert env.subnet.prefixlen == 26 and low.network_address <= env.subnet[0] <= high[0]
            assert (
                env.mtu == 1400 - 50 and env.ipmasq is False
            )  # Backend.MTU: the link's, less vxlan's
        # the lease and the config published in etcd
        leases, _ = LeaseStore(state.etcd(), prefix).list()
        assert {str(s) for s in leases} == {str(e.subnet) for e in envs}
        assert all(info.backend_data["VNI"] == 42 for info, _kv in leases.values())
        config = state.etcd().get(f"{prefix}/config")
        assert config is not None and json.loads(config.value)["SubnetLen"] == 26
        # the device: the file's VNI, port and MTU
        device = nodes[0].links()["pycni.42"]
        vxlan = device["linkinfo"]["info_data"]  # type: ignore[index]
        assert (vxlan["id"], vxlan["port"], device["mtu"]) == (42, 4790, 1350), device  # type: ignore[index]
        # the data path: node 1 reaches node 2's overlay address through UDP 4790
        other = str(envs[1].subnet.network_address)  # type: ignore[union-attr]
        wait_for(
            lambda: nodes[0].ping(other, timeout=1),
            30,
            f"ping {other} over the overlay",
            log.read_text,
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        for name in names:
            harness.Namespace(name).delete()
        state.etcd().delete_prefix(prefix)


def _etcd_agent(namespace: str, endpoint: str, prefix: str, file: Path, *flags: str) -> list[str]:
    """An agent of node ``namespace`` with no --net-conf: flags, or etcd's config key."""
    return [
        "nsenter", f"--net={playground.netns_path(namespace)}", "--",
        sys.executable, "-m", cluster.AGENT_MARKER, "--etcd-endpoints", endpoint,
        "--etcd-prefix", prefix, "--iface", "eth0", "--subnet-file", str(file), "--ttl", "30",
        "--no-ipmasq", *flags,
    ]  # fmt: skip


ETCD_CONF = {  # as an operator puts it for flanneld: etcdctl put <prefix>/config '...'
    "Network": "10.247.0.0/16",
    "SubnetLen": 26,
    "SubnetMin": "10.247.8.0",
    "SubnetMax": "10.247.8.192",
    "Backend": {"Type": "vxlan", "VNI": 43, "Port": 4791},
}


def test_flannels_etcd_config_key_drives_an_agent_given_no_network(
    up: PlaygroundCluster, tmp_path: Path
) -> None:
    """flanneld's etcd mode: the whole net-conf in <prefix>/config. An agent with no network
    flags takes it (SubnetLen, SubnetMin/Max, VNI, Port reach the lease and the device); an
    agent whose flags disagree refuses naming both; a key an older pycni wrote (the network
    alone) still serves agents started with the flags they were started with."""
    state = up.state()
    etcd = state.etcd()
    prefix, legacy = f"/etcdconf-{os.getpid()}", f"/etcdconf-old-{os.getpid()}"
    names = [f"{up.prefix}k3", f"{up.prefix}k4"]  # veths k3, k4 on the underlay
    files = [tmp_path / "e1.env", tmp_path / "e2.env"]
    log = tmp_path / "agent.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        nodes = [
            _node(state, n, a) for n, a in zip(names, ["10.99.0.211", "10.99.0.212"], strict=True)
        ]
        etcd.put(f"{prefix}/config", json.dumps(ETCD_CONF))
        checked = subprocess.run(
            _etcd_agent(names[0], state.etcd_endpoint, prefix, files[0], "--check-config"),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert checked.returncode == 0 and "VNI 43, port 4791" in checked.stdout, checked
        assert "10.247.8.0/26 to 10.247.8.192/26" in checked.stdout, checked.stdout

        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    _etcd_agent(names[0], state.etcd_endpoint, prefix, files[0]),
                    stdout=out,
                    stderr=out,
                )
            )
        wait_for(files[0].exists, 60, "the subnet file", log.read_text)
        env = _ready(str(files[0]))
        assert env.subnet is not None and env.subnet.prefixlen == 26, env
        assert ipaddress.ip_network("10.247.8.0/24").supernet_of(env.subnet)  # type: ignore[arg-type]
        device = nodes[0].links()["pycni.43"]
        vxlan = device["linkinfo"]["info_data"]  # type: ignore[index]
        assert (vxlan["id"], vxlan["port"]) == (43, 4791), device  # type: ignore[index]
        value = etcd.get(f"{prefix}/config")
        assert value is not None and json.loads(value.value) == ETCD_CONF  # not rewritten

        # flags that disagree with the key (pycni's /24 default, host-gw): refused, both named
        refused = subprocess.run(
            _etcd_agent(names[1], state.etcd_endpoint, prefix, files[1],
                        "--network", "10.247.0.0/16", "--backend", "host-gw"),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode != 0, refused.stderr
        assert f"in etcd's {prefix}/config" in refused.stderr, refused.stderr
        assert "pycni agent: Backend.Type is vxlan in etcd's" in refused.stderr, refused.stderr
        assert "host-gw in the flags" in refused.stderr and refused.returncode == 1
        assert not files[1].exists() and set(nodes[1].links()) == {"lo", "eth0"}
        leases, _ = LeaseStore(etcd, prefix).list()
        assert list(leases) == [env.subnet]

        # a key an older pycni agent wrote: the network alone; flags that agree still work
        old = {"Network": "10.248.0.0/16", "SubnetLen": 24}
        etcd.put(f"{legacy}/config", json.dumps(old))
        with log.open("ab") as out:
            procs.append(
                subprocess.Popen(
                    _etcd_agent(
                        names[1],
                        state.etcd_endpoint,
                        legacy,
                        files[1],
                        "--network",
                        "10.248.0.0/16",
                        "--backend",
                        "host-gw",
                    ),
                    stdout=out,
                    stderr=out,
                )
            )
        wait_for(files[1].exists, 60, "the old cluster's subnet file", log.read_text)
        assert str(_ready(str(files[1])).network) == "10.248.0.0/16"
        value = etcd.get(f"{legacy}/config")
        assert value is not None and json.loads(value.value) == old
        assert [p.poll() for p in procs] == [None, None], log.read_text()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        for name in names:
            harness.Namespace(name).delete()
        etcd.delete_prefix(prefix)
        etcd.delete_prefix(legacy)
