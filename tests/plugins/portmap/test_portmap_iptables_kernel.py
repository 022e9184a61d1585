"""The iptables backend against each Go reference portmap (its default backend): the same
rules for the same config, and each plugin deletes what the other created, with and without
runtimeConfig. Plus the legacy variant. No pods are needed: portmap only touches the node."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests import harness, node_view
from tests.harness import Namespace, exec_plugin
from tests.references import Reference

pytestmark = [pytest.mark.kernel, pytest.mark.interop]

NET = "pmnet"
CID = "4f6c1ed1c7b0d5a2ffeecb5e0e1a1d3f"

# 17 TCP ports (multiport split at 15), UDP, a hostIP of each family
MAPPINGS: list[dict[str, Any]] = [
    {"hostPort": 7000 + i, "containerPort": 80, "protocol": "tcp"} for i in range(17)
] + [
    {"hostPort": 8081, "containerPort": 81, "protocol": "udp"},
    {"hostPort": 8090, "containerPort": 80, "protocol": "tcp", "hostIP": "10.99.0.1"},
    {"hostPort": 8091, "containerPort": 80, "protocol": "tcp", "hostIP": "fd00:99::1"},
]

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "br0"},
        {"name": "veth1"},
        {"name": "eth0", "sandbox": "/var/run/netns/x"},
    ],
    "ips": [
        {"address": "10.99.0.2/24", "gateway": "10.99.0.1", "interface": 2},
        {"address": "fd00:99::2/64", "gateway": "fd00:99::1", "interface": 2},
    ],
}


def conf(mappings: list[dict[str, Any]] | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"cniVersion": "1.0.0", "name": NET, "type": "portmap", **extra}
    out["prevResult"] = PREV
    if mappings is not None:
        out["runtimeConfig"] = {"portMappings": mappings}
    return out


_POD: list[Namespace] = []


def _with_pod_subnet(node: Namespace) -> Namespace:
    """The pod subnet routed to a local veth (portmap looks the route up)."""
    node.run("ip", "link", "add", "pmh0", "type", "veth", "peer", "name", "pmh1")
    node.run("ip", "addr", "add", "10.99.0.1/24", "dev", "pmh0")
    node.run("ip", "addr", "add", "fd00:99::1/64", "dev", "pmh0", "nodad")
    node.run("ip", "link", "set", "pmh0", "up")
    node.run("ip", "link", "set", "pmh1", "up")
    return node


@pytest.fixture
def go_portmap(go_plugin_dir: Path) -> Path:
    """Each Go reference's portmap in turn (the test id names it)."""
    return go_plugin_dir / "portmap"


@pytest.fixture
def host(node: Namespace, pod_factory: Any) -> Namespace:
    """A node with the pod subnet routed to a local veth."""
    _POD[:] = [pod_factory()]  # only for CNI_NETNS: portmap never enters it
    return _with_pod_subnet(node)


def run(node: Namespace, plugin: Path, command: str, config: dict[str, Any]) -> None:
    with node.entered():
        exec_plugin(
            plugin, command, config, container_id=CID, netns=_POD[0].path, cni_path="/x"
        ).ok()


def nat(node: Namespace, family: int = 4, variant: str = "") -> str:
    tool = ("iptables" if family == 4 else "ip6tables") + (f"-{variant}" if variant else "")
    text = node.run(f"{tool}-save", "-t", "nat").stdout
    return "\n".join(
        re.sub(r"\[\d+:\d+\]", "", line) for line in text.splitlines() if not line.startswith("#")
    )


def chains(text: str) -> list[str]:
    return sorted(line[1:].split()[0] for line in text.splitlines() if line.startswith(":CNI-"))


def test_same_rules_as_the_reference(host: Namespace, plugin_dir: Path, go_portmap: Path) -> None:
    ours = plugin_dir / "portmap"
    run(host, go_portmap, "ADD", conf(MAPPINGS))
    go4, go6 = nat(host, 4), nat(host, 6)
    run(host, ours, "DEL", conf(MAPPINGS, backend="iptables"))
    run(host, ours, "ADD", conf(MAPPINGS, backend="iptables"))
    ours4, ours6 = nat(host, 4), nat(host, 6)
    assert sorted(ours4.splitlines()) == sorted(go4.splitlines())
    assert sorted(ours6.splitlines()) == sorted(go6.splitlines())
    assert (
        "--dports 7000,7001,7002,7003,7004,7005,7006,7007,7008,7009,7010,7011,7012,7013,7014 "
        in ours4
    )
    run(host, ours, "CHECK", conf(MAPPINGS, backend="iptables"))
    run(host, ours, "DEL", conf(None, backend="iptables"))


def test_same_node_view_as_the_reference(
    pod_factory: Any, plugin_dir: Path, go_portmap: Path, go_reference: Reference
) -> None:
    """Twin nodes: what ip/tc/nft show (iptables-nft's tables in ``nft -j list ruleset``,
    the route_localnet and hairpin state aside) after ADD and after DEL, compared with Go's
    (tests/node_view.py)."""
    _POD[:] = [pod_factory()]
    views: dict[str, list[dict[str, Any]]] = {}
    for impl, plugin, extra in (
        ("go", go_portmap, {}),
        ("pycni", plugin_dir / "portmap", {"backend": "iptables"}),
    ):
        node = _with_pod_subnet(harness.create_namespace("node"))
        try:
            run(node, plugin, "ADD", conf(MAPPINGS, snat=True, **extra))
            views[impl] = [node_view.snapshot(node)]
            run(node, plugin, "DEL", conf(MAPPINGS, **extra))
            views[impl].append(node_view.snapshot(node))
        finally:
            node.delete()
    whens = ("after ADD", "after DEL")
    for when, ours, theirs in zip(whens, views["pycni"], views["go"], strict=True):
        node_view.compare(ours, theirs, f"portmap {when}", go_reference)
    assert any("CNI-DN-" in str(item) for item in views["pycni"][0]["nft"])
    assert not any("CNI-DN-" in str(item) for item in views["pycni"][1]["nft"])


@pytest.mark.parametrize("with_mappings", [True, False])
def test_ours_deletes_what_the_reference_added(
    host: Namespace, plugin_dir: Path, go_portmap: Path, with_mappings: bool
) -> None:
    ours = plugin_dir / "portmap"
    run(host, go_portmap, "ADD", conf(MAPPINGS))
    dn = [c for c in chains(nat(host)) if c.startswith("CNI-DN-")]
    assert len(dn) == 1
    run(host, ours, "DEL", conf(MAPPINGS if with_mappings else None, backend="iptables"))
    for family in (4, 6):
        text = nat(host, family)
        assert "CNI-DN-" not in text, text
        assert "-A CNI-HOSTPORT-DNAT" not in text, text
    # the shared top-level chains stay, as with the reference
    assert "CNI-HOSTPORT-DNAT" in chains(nat(host))


def test_reference_deletes_what_ours_added(
    host: Namespace, plugin_dir: Path, go_portmap: Path
) -> None:
    run(host, plugin_dir / "portmap", "ADD", conf(MAPPINGS, backend="iptables"))
    run(host, go_portmap, "DEL", conf(MAPPINGS))
    for family in (4, 6):
        assert "CNI-DN-" not in nat(host, family)


def test_legacy_variant(host: Namespace, plugin_dir: Path) -> None:
    ours = plugin_dir / "portmap"
    extra = {"backend": "iptables", "iptablesVariant": "legacy"}
    run(host, ours, "ADD", conf(MAPPINGS, **extra))
    text = nat(host, 4, "legacy")
    assert len([c for c in chains(text) if c.startswith("CNI-DN-")]) == 1
    assert "CNI-DN-" not in nat(host, 4, "nft")
    run(host, ours, "CHECK", conf(MAPPINGS, **extra))
    run(host, ours, "DEL", conf(None, **extra))
    assert "CNI-DN-" not in nat(host, 4, "legacy")
    assert "CNI-DN-" not in nat(host, 6, "legacy")


def _exec(node: Namespace, plugin: Path, command: str, config: dict[str, Any], **kw: Any) -> Any:
    with node.entered():
        return exec_plugin(
            plugin, command, config, container_id=CID, netns=_POD[0].path, cni_path="/x", **kw
        )


def test_status_and_bad_input(host: Namespace, plugin_dir: Path) -> None:
    ours = plugin_dir / "portmap"
    status = {"cniVersion": "1.1.0", "name": NET, "type": "portmap"}
    _exec(host, ours, "STATUS", status).ok()
    _exec(host, ours, "STATUS", {**status, "backend": "iptables"}).ok()
    # without the iptables tools on PATH the iptables backend is not usable: code 50
    run = _exec(host, ours, "STATUS", {**status, "backend": "iptables"}, extra_env={"PATH": "/"})
    assert run.code == 1 and run.json["code"] == 50
    bad = conf([{"hostPort": 99999, "containerPort": 80}])
    run = _exec(host, ours, "ADD", bad)
    assert run.code == 1 and run.json["code"] == 7 and "hostPort" in str(run.json["msg"])
    assert "Traceback" not in run.stdout
