"""300 pods on one network, through the runtime, the warm daemon, the real plugins and kernel.

As the pods go from 10 to 300 a packet's path must not lengthen: every chain of pycni's tables
(masquerade, portmap) keeps its number of rules and no chain is added: only set and map
elements grow (portmap: one DNAT map element per mapping and family, and the masquerade set
elements of its hairpin subnet and localhost). The node's own link state does not grow
either: its IPv6 tables hold the same routes at 10 and at 300 pods and no host veth has an
IPv6 address (the bridge ports have no IPv6: docs/plugins/bridge.md). The node-wide GC with
300 live attachments frees nothing; DEL of all 300 leaves nothing behind. (The test takes
~45 s; the curve to 1000 pods is bench/'s job: scale_curve.py in make bench, profile_scale.py.)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.entrypoints import install
from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from tests import harness

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

NET = "scale-net"
FEW, MANY = 10, 300
TABLES = {("inet", "cni_plugins_masquerade"), ("inet", "pycni_portmap")}
PYCNI = str(Path(sys.executable).parent / "pycni")


@pytest.fixture(scope="module")
def daemon_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Fast forwarders to a daemon of our own: 100s of exec'd Python plugins take minutes."""
    directory = tmp_path_factory.mktemp("scale-plugins")
    sock = str(tmp_path_factory.mktemp("scale-daemon") / "pycni.sock")
    install.install(directory, form="auto", socket_path=sock)
    with harness.running_daemon(sock, "WARNING"):
        yield str(directory)


def conflist(data_dir: Path) -> bytes:
    return json.dumps(
        {
            "cniVersion": "1.1.0",
            "name": NET,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "scale0",
                    "isGateway": True,
                    "ipMasq": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.93.0.0/16"}], [{"subnet": "fd00:93::/64"}]],
                        "dataDir": str(data_dir),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
    ).encode()


def snapshot(node: harness.Namespace) -> tuple[dict[str, int], dict[str, int]]:
    """(rules per chain, elements per set or map) of pycni's tables."""
    data: Any = json.loads(node.run("nft", "-j", "list", "ruleset").stdout)
    chains: dict[str, int] = {}
    elements: dict[str, int] = {}
    for item in data["nftables"]:
        for kind in ("chain", "rule", "set", "map"):
            obj = item.get(kind)
            if obj is None or (obj["family"], obj["table"]) not in TABLES:
                continue
            if kind == "chain":
                chains.setdefault(f"{obj['table']}/{obj['name']}", 0)
            elif kind == "rule":
                key = f"{obj['table']}/{obj['chain']}"
                chains[key] = chains.get(key, 0) + 1
            else:
                elements[f"{obj['table']}/{obj['name']}"] = len(obj.get("elem", []))
    return chains, elements


def node_ipv6(node: harness.Namespace) -> tuple[list[str], int]:
    """(every route of the node's IPv6 tables, IPv6 addresses on host veths)."""
    routes: Any = json.loads(node.run("ip", "-j", "-6", "route", "show", "table", "all").stdout)
    addrs: Any = json.loads(node.run("ip", "-j", "-6", "addr", "show").stdout)
    on_veths = sum(
        len(link.get("addr_info", [])) for link in addrs if link["ifname"].startswith("veth")
    )
    # the bridge's own local and anycast entries come once its address passed DAD, whenever
    # that is: not the pods' doing, so left out (a per-pod entry names a veth)
    shown = sorted(
        f"{r.get('type', '')} {r['dst']} {r.get('dev', '')}"
        for r in routes
        if not (r.get("dev") == "scale0" and r.get("type") in ("local", "anycast"))
    )
    return shown, on_veths


def test_300_pods_rules_constant_gc_keeps_del_clears(
    node: harness.Namespace, tmp_state: harness.State, daemon_path: str
) -> None:
    raw = conflist(tmp_state.data_dir)
    (tmp_state.conf_dir / "10-scale.conflist").write_bytes(raw)
    conf = conf_list_from_bytes(raw)
    cni = CNIConfig([daemon_path], cache_dir=str(tmp_state.cache_dir))
    pods: list[harness.Namespace] = []

    def runtime_conf(i: int) -> RuntimeConf:
        mapping = {"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"}
        return RuntimeConf(
            container_id=pods[i].name,
            netns=pods[i].path,
            ifname="eth0",
            capability_args={"portMappings": [mapping]},
        )

    try:
        snaps = {}
        ipv6: dict[int, tuple[list[str], int]] = {}
        for i in range(MANY):
            pods.append(harness.create_namespace("pod"))
            with node.entered():
                cni.add_network_list(conf, runtime_conf(i))
            if i + 1 in (FEW, MANY):
                snaps[i + 1] = snapshot(node)
                ipv6[i + 1] = node_ipv6(node)
        (few_chains, few_elems), (many_chains, many_elems) = snaps[FEW], snaps[MANY]

        # the node's IPv6 tables do not grow with the pods, no host veth has an IPv6 address
        assert ipv6[MANY] == ipv6[FEW]
        assert ipv6[MANY][1] == 0
        assert not [r for r in ipv6[MANY][0] if " veth" in r]

        # the same chains with the same number of rules at 10 and at 300 pods
        assert many_chains == few_chains
        assert not any(c.startswith("pycni_portmap/pm-") for c in many_chains)
        assert many_chains["pycni_portmap/hostports"] == 9
        # the masquerade table: one jump per network, one rule per subnet, whatever the pods
        masq = {c: n for c, n in many_chains.items() if c.startswith("cni_plugins_masquerade/")}
        assert sum(masq.values()) == 3 + 1 + 2  # postrouting, masq_checks, the network's chain
        # the elements grew instead: one address per pod and family, one port per pod
        assert set(many_elems) == set(few_elems)
        grown = {s: many_elems[s] - few_elems[s] for s in few_elems}
        masq_sets = [s for s in grown if s.startswith("cni_plugins_masquerade/")]
        assert len(masq_sets) == 2 and all(grown[s] == MANY - FEW for s in masq_sets)
        assert grown["pycni_portmap/dnat4"] == grown["pycni_portmap/dnat6"] == MANY - FEW
        assert many_elems["pycni_portmap/dnat4"] == MANY
        assert grown["pycni_portmap/masq4-b13-p16"] == MANY - FEW  # the pods' subnet
        assert grown["pycni_portmap/masq4-b13-p32"] == MANY - FEW  # localhost
        assert grown["pycni_portmap/masq6-b13-p64"] == MANY - FEW
        assert many_elems["pycni_portmap/ports4"] == 0  # the chain layout is not used

        # the node-wide GC with 300 live attachments frees nothing
        env = {**os.environ, "NETCONFPATH": str(tmp_state.conf_dir), "CNI_PATH": daemon_path}
        gc = node.run(
            PYCNI, "gc", "--cache-dir", str(tmp_state.cache_dir), check=False, env=env, timeout=120
        )
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert snapshot(node) == snaps[MANY]
        assert len(tmp_state.reservations(NET)) == 2 * MANY
        assert len([n for n in node.links() if n.startswith("veth")]) == MANY
        assert len(tmp_state.cache_files()) == MANY

        for i in reversed(range(MANY)):
            with node.entered():
                cni.del_network_list(conf, runtime_conf(i))
        chains, elems = snapshot(node)
        # the masquerade table went with its last pod (as the reference's iptables chains do)
        masq = "cni_plugins_masquerade/"
        assert chains == {c: n for c, n in few_chains.items() if not c.startswith(masq)}
        assert not any(s.startswith(masq) for s in elems)
        assert set(elems.values()) == {0}
        assert tmp_state.reservations(NET) == []
        assert [n for n in node.links() if n.startswith("veth")] == []
        assert tmp_state.cache_files() == []
    finally:
        for pod in pods:
            pod.delete()
