"""`pycni inspect`'s view of the cluster agent: which subnet files it reads and how it
reports them (the kernel side is covered by tests/integration/test_cluster.py)."""

from __future__ import annotations

import json
from pathlib import Path

from pycni.inspect import cluster as agent_state
from pycni.inspect.collect import read_networks
from pycni.inspect.model import ClusterAgentState, NodeState, OwnedRoute, VxlanDevice
from pycni.inspect.render_text import render


def _write_conflist(conf_dir: Path, name: str, plugin: dict[str, object]) -> None:
    conf_dir.mkdir(exist_ok=True)
    body = {"cniVersion": "1.0.0", "name": name, "plugins": [plugin, {"type": "portmap"}]}
    (conf_dir / f"10-{name}.conflist").write_text(json.dumps(body))


def test_subnet_files_come_from_flannel_networks_only(tmp_path: Path) -> None:
    conf_dir = tmp_path / "net.d"
    _write_conflist(conf_dir, "a", {"type": "flannel", "subnetFile": str(tmp_path / "a.env")})
    _write_conflist(conf_dir, "b", {"type": "bridge", "subnetFile": str(tmp_path / "b.env")})
    _write_conflist(conf_dir, "c", {"type": "flannel", "subnetFile": str(tmp_path / "a.env")})
    assert agent_state.subnet_files(read_networks(str(conf_dir))) == [str(tmp_path / "a.env")]


def test_lease_is_read_from_the_subnet_file(tmp_path: Path) -> None:
    env = tmp_path / "subnet.env"
    env.write_text(
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\n"
        "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    )
    lease = agent_state.read_lease(str(env))
    assert (lease.network, lease.subnet, lease.gateway) == (
        "10.244.0.0/16",
        "10.244.7.0/24",
        "10.244.7.1/24",
    )
    assert (lease.mtu, lease.ipmasq, lease.error) == (1450, True, None)
    missing = agent_state.read_lease(str(tmp_path / "nope.env"))
    assert missing.subnet == "" and "not written" in str(missing.error)
    env.write_text("FLANNEL_NETWORK=10.244.0.0/16\n")
    assert "FLANNEL_SUBNET" in str(agent_state.read_lease(str(env)).error)


def test_text_report_has_a_cluster_section_only_with_an_agent() -> None:
    state = NodeState(netns="node1", conf_dir="c", cache_dir="k", data_dir="d")
    assert "Cluster agent" not in render(state, [])
    state.cluster = ClusterAgentState(
        routes=[OwnedRoute("10.244.9.0/24", "10.244.9.0", "pycni.1", True)],
        vxlan_devices=[
            VxlanDevice(
                "pycni.1", 5, 1, "10.99.0.11", 8472, peers={"aa:bb:cc:dd:ee:ff": "10.99.0.12"}
            )
        ],
        masquerade_table=True,
    )
    text = render(state, [])
    assert "Cluster agent (masquerade table present)" in text
    assert "10.244.9.0/24  via 10.244.9.0  dev pycni.1  onlink" in text
    assert "VXLAN pycni.1 vni 1 local 10.99.0.11 port 8472" in text
    assert "aa:bb:cc:dd:ee:ff  → 10.99.0.12" in text
