# ruff: noqa: F811  (pytest fixtures imported from tests/plugins/bridge/support.py)
"""bridge ports without IPv6 (the default): IPv6 and dual-stack pods still reach each other and
the gateway across the bridge, CHECK passes, and the node keeps no IPv6 state per pod: no address
on a host veth, no entry of the node's IPv6 tables on one; with ``hostVethIPv6`` the reference's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests.plugins.bridge.support import (  # noqa: F401
    bridge_dir,
    conf,
    host_veths,
    ip_json,
    run,
    sysctl_in,
    wait_ping,
)
from tests.plugins.portmap.test_portmap_chain_kernel import (  # noqa: F401
    MAPPINGS,
    NODE_UP4,
    NODE_UP6,
    Env,
    env_factory,
    fetch,
    pod_ip,
    servers,
)

pytestmark = pytest.mark.kernel

SUBNETS = {
    "ipv6": ("fd78::/64",),
    "dual": ("10.78.0.0/24", "fd78::/64"),
}
GATEWAYS = {"10.78.0.0/24": "10.78.0.1", "fd78::/64": "fd78::1"}


def _node_ipv6_routes(node: harness.Namespace) -> list[str]:
    """Every route of every IPv6 table of the node, as ``dst dev``."""
    return sorted(
        f"{r.get('type', '')} {r['dst']} {r.get('dev', '')} {r.get('table', 'main')}"
        for r in ip_json(node, "-6", "route", "show", "table", "all")
    )


def _settled_ipv6_routes(node: harness.Namespace, bridge: str, timeout: float = 15) -> list[str]:
    """The node's IPv6 routes once the bridge's own link-local address is configured: its local
    and anycast routes appear when the kernel's DAD of that address ends, which may be after
    the pods' pings, so a snapshot taken before would miss them."""
    deadline = time.monotonic() + timeout
    while True:
        routes = _node_ipv6_routes(node)
        if {"anycast", "local"} <= {
            r.split()[0] for r in routes if r.split()[1].startswith("fe80:") and f" {bridge} " in r
        }:
            return routes
        assert time.monotonic() < deadline, f"no link-local routes on {bridge}: {routes}"
        time.sleep(0.05)


def _ipv6_addrs(node: harness.Namespace, dev: str) -> list[str]:
    return [a for a in node.addresses(dev) if ":" in a]


def _ips(result: dict[str, Any]) -> list[str]:
    return [str(ip["address"]).split("/")[0] for ip in result["ips"]]


@pytest.mark.parametrize("stack", sorted(SUBNETS))
def test_pods_reach_each_other_and_the_gateway_over_ports_without_ipv6(
    stack: str,
    bridge_dir: Path,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
) -> None:
    subnets = SUBNETS[stack]
    c = conf(tmp_state, subnets=subnets, isDefaultGateway=True)
    pods = [pod_factory() for _ in range(3)]
    results = [
        run(bridge_dir, node, "ADD", c, p, cid=f"c{i}").ok().json for i, p in enumerate(pods)
    ]
    for i, (pod, result) in enumerate(zip(pods, results, strict=True)):
        veth = result["interfaces"][1]["name"]
        assert node.links()[veth]["master"] == "cnibr0"
        assert "UP" in node.links()[veth]["flags"]
        assert _ipv6_addrs(node, veth) == []
        assert sysctl_in(node, f"net/ipv6/conf/{veth}/disable_ipv6") == "1"
        for gw in (GATEWAYS[s] for s in subnets):
            assert wait_ping(pod, gw), f"pod {i} cannot reach the gateway {gw}"
    for i, pod in enumerate(pods):
        for j, other in enumerate(results):
            if i != j:
                for ip in _ips(other):
                    assert wait_ping(pod, ip), f"pod {i} cannot reach pod {j} at {ip}"
    # the node's IPv6 tables name no host veth and do not grow with the pods
    routes = _settled_ipv6_routes(node, "cnibr0")
    assert not [r for r in routes if " veth" in r], routes
    for i, (pod, result) in enumerate(zip(pods, results, strict=True)):
        chk = run(bridge_dir, node, "CHECK", dict(c, prevResult=result), pod, cid=f"c{i}")
        assert chk.code == 0, chk.stderr
    for i in (2, 1):
        run(bridge_dir, node, "DEL", c, pods[i], cid=f"c{i}").ok()
    assert _node_ipv6_routes(node) == routes  # one pod left: the same tables as with three
    run(bridge_dir, node, "DEL", c, pods[0], cid="c0").ok()
    assert host_veths(node) == []
    assert tmp_state.reservations("brnet") == []


def test_host_veth_ipv6_switch_gives_the_reference_port(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    """``hostVethIPv6: true``: the host veth keeps IPv6 (a link-local address, accept_ra=0)
    and its routes in the node's tables, as the reference's does; pods still reach the gateway."""
    c = conf(tmp_state, subnets=SUBNETS["dual"], isDefaultGateway=True, hostVethIPv6=True)
    pod = pod_factory()
    result = run(bridge_dir, node, "ADD", c, pod).ok().json
    veth = result["interfaces"][1]["name"]
    assert sysctl_in(node, f"net/ipv6/conf/{veth}/disable_ipv6") == "0"
    assert sysctl_in(node, f"net/ipv6/conf/{veth}/accept_ra") == "0"
    assert [a for a in _ipv6_addrs(node, veth) if a.startswith("fe80:")]
    assert [r for r in _node_ipv6_routes(node) if f" {veth} " in r]
    assert wait_ping(pod, "fd78::1")
    assert pod.ping("10.78.0.1")
    chk = run(bridge_dir, node, "CHECK", dict(c, prevResult=result), pod)
    assert chk.code == 0, chk.stderr
    run(bridge_dir, node, "DEL", c, pod).ok()
    assert host_veths(node) == []


def test_host_veth_ipv6_must_be_a_boolean(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    pod = pod_factory()
    out = run(bridge_dir, node, "ADD", conf(tmp_state, hostVethIPv6="yes"), pod)
    assert out.code != 0
    assert "hostVethIPv6" in out.stdout + out.stderr
    assert host_veths(node) == []


def test_hairpin_and_port_mappings_over_ports_without_ipv6(
    env_factory: Callable[..., Env],
    pod_factory: Callable[[], harness.Namespace],
    servers: Callable[[harness.Namespace, str], None],
) -> None:
    """The pod reaches its own published port through the node (hairpin) and another pod
    reaches it, over IPv4 and IPv6, with the bridge ports having no IPv6 address."""
    env = env_factory()
    pod1, pod2 = pod_factory(), pod_factory()
    prev1 = env.add("cid-pod1", pod1, MAPPINGS)
    env.add("cid-pod2", pod2, [])
    servers(pod1, "pod1")
    ip6 = pod_ip(prev1, 6)
    pod1.run(
        "sh",
        "-c",
        f"for i in $(seq 50); do ip -6 addr show tentative | grep -q {ip6} "
        "|| exit 0; sleep 0.1; done",
    )
    veths = host_veths(env.node)
    assert len(veths) == 2
    assert all(_ipv6_addrs(env.node, v) == [] for v in veths)
    for host in (NODE_UP4, NODE_UP6):
        assert fetch(pod1, "tcp", host, 8080) == "tcp-pod1", f"hairpin via {host}"
        assert fetch(pod2, "tcp", host, 8080) == "tcp-pod1", f"pod to pod via {host}"
        assert fetch(env.outside, "tcp", host, 8080) == "tcp-pod1"
    env.delete("cid-pod1", MAPPINGS)
    env.delete("cid-pod2", None)
    assert host_veths(env.node) == []
