"""podman's default conflist (bridge, portmap, firewall, tuning at 0.4.0) through pycni's runtime
and plugins: ADD, CHECK and DEL, as podman would call them (podman itself is in tests/interop)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pycni.runtime import CNIConfig, RuntimeConf, conf_list_from_bytes
from tests import harness

pytestmark = pytest.mark.kernel

# Debian's podman package ships this file as /etc/cni/net.d/87-podman-bridge.conflist; only the
# host-local dataDir is added so that the test keeps its state in a temporary directory.
PODMAN_DEFAULT = {
    "cniVersion": "0.4.0",
    "name": "podman",
    "plugins": [
        {
            "type": "bridge",
            "bridge": "cni-podman0",
            "isGateway": True,
            "ipMasq": True,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "routes": [{"dst": "0.0.0.0/0"}],
                "ranges": [[{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}]],
            },
        },
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "firewall"},
        {"type": "tuning"},
    ],
}


def test_podman_default_conflist_add_check_del(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    tmp_state: harness.State,
    plugin_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYCNI_FIREWALL_DATA_DIR", str(tmp_state.root / "firewall"))
    monkeypatch.setenv("PYCNI_TUNING_DATA_DIR", str(tmp_state.root / "tuning"))
    conf_dict = json.loads(json.dumps(PODMAN_DEFAULT))
    conf_dict["plugins"][0]["ipam"]["dataDir"] = str(tmp_state.data_dir)
    conf = conf_list_from_bytes(json.dumps(conf_dict).encode())
    cni = CNIConfig([str(plugin_dir)], cache_dir=str(tmp_state.cache_dir))
    pods = [pod_factory(), pod_factory()]
    rts = [
        RuntimeConf(
            container_id=f"podman{i}",
            netns=pod.path,
            ifname="eth0",
            args=(("IgnoreUnknown", "1"), ("K8S_POD_NAME", f"p{i}")),
            capability_args={
                "portMappings": [{"hostPort": 8080 + i, "containerPort": 80, "protocol": "tcp"}]
            },
        )
        for i, pod in enumerate(pods)
    ]
    with node.entered():
        results = [cni.add_network_list(conf, rt) for rt in rts]
    addrs = [str(r.ips[0].address.ip) for r in results]
    assert all(r.cni_version == "0.4.0" for r in results)
    assert all(a.startswith("10.88.") for a in addrs)
    assert pods[0].ping(addrs[1]) and pods[1].ping("10.88.0.1")
    forward = node.run("iptables-save", "-t", "filter").stdout
    assert "CNI-FORWARD" in forward and addrs[0] in forward
    with node.entered():
        for rt in rts:
            cni.check_network_list(conf, rt)
        for rt in rts:
            cni.del_network_list(conf, rt)
            cni.del_network_list(conf, rt)  # idempotent
    assert tmp_state.reservations("podman") == []
    assert tmp_state.cache_files() == []
    assert addrs[0] not in node.run("iptables-save", "-t", "filter").stdout
    assert not [n for n in node.links() if n.startswith("veth")]
