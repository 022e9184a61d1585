"""Synthetic inspect models for the SVG tests: a node like the demo's with N pods."""

from __future__ import annotations

from pycni.inspect.leaks import Leak
from pycni.inspect.model import (
    Attachment,
    Bridge,
    DaemonStatus,
    HostInterface,
    Network,
    NodeState,
    PodLink,
    PortMapping,
    Route,
    Veth,
)


def demo_like(pods: int, *, leaky: bool = True) -> tuple[NodeState, list[Leak]]:
    """A node with an uplink, one bridge with ``pods`` pods (one mapping per 10 pods), a
    warm daemon, and (``leaky``) one leaked veth, mapping and reservation."""
    state = NodeState(
        netns="pycni-demo-node",
        conf_dir="/run/pycni-demo/net.d",
        cache_dir="/run/pycni-demo/cache",
        data_dir="/run/pycni-demo/networks",
    )
    state.networks = [
        Network(
            "pycni-demo",
            "/run/pycni-demo/net.d/10-pycni-demo.conflist",
            "1.1.0",
            ["bridge", "portmap"],
            "cni-demo0",
            ["10.88.0.0/16"],
        ),
        Network("pycni-demo-lo", "/run/pycni-demo/net.d/99-lo.conflist", "1.1.0", ["loopback"]),
    ]
    state.interfaces = [HostInterface("lo", 1, "", True, ["127.0.0.1/8"])]
    state.veths = [
        Veth(
            "eth0",
            2,
            up=True,
            addresses=["192.168.250.1/24"],
            peer_index=2,
            peer_netnsid=0,
            peer=PodLink(
                "pycni-demo-client",
                "/run/netns/pycni-demo-client",
                "eth0",
                2,
                "",
                ["192.168.250.2/24"],
            ),
        )
    ]
    ports = []
    for i in range(pods):
        name = f"veth{i:04x}a8c2"
        ports.append(name)
        addr = f"10.88.{i // 250}.{i % 250 + 2}"
        ns = f"pycni-demo-pod{i + 1}"
        state.veths.append(
            Veth(
                name,
                10 + i,
                master="cni-demo0",
                up=True,
                peer_index=2,
                peer_netnsid=i + 1,
                peer=PodLink(ns, f"/run/netns/{ns}", "eth0", 2, "", [f"{addr}/16"]),
            )
        )
        state.attachments.append(
            Attachment(
                "pycni-demo",
                ns,
                "eth0",
                f"/run/netns/{ns}",
                True,
                f"/run/pycni-demo/cache/results/pycni-demo-{ns}-eth0",
                [f"{addr}/16"],
                [name],
            )
        )
        if i % 10 == 0:
            state.port_mappings.append(
                PortMapping(
                    "inet",
                    "pycni_portmap",
                    f"cni-pm-{i}",
                    100 + i,
                    "tcp",
                    8080 + i,
                    addr,
                    80,
                    owner=f"cni-pm-{i}",
                )
            )
    state.bridges = [Bridge("cni-demo0", 3, up=True, addresses=["10.88.0.1/16"], ports=ports)]
    state.routes = [
        Route("default", "eth0", "192.168.250.254"),
        Route("10.88.0.0/16", "cni-demo0"),
        Route("192.168.250.0/24", "eth0"),
    ]
    state.daemon = DaemonStatus(
        "/run/pycni/pycni.sock", True, "warm", "ok", 4242, 16, 12.5, "systemd unit pycni.service"
    )
    leaks: list[Leak] = []
    if leaky:
        state.veths.append(
            Veth(
                "vethdead01",
                999,
                master="cni-demo0",
                peer_index=2,
                peer_netnsid=77,
                peer=PodLink("orphan-ns", "/run/netns/orphan-ns", "eth0", 2, "", ["10.88.9.9/16"]),
            )
        )
        state.bridges[0].ports.append("vethdead01")
        stale = PortMapping(
            "inet",
            "pycni_portmap",
            "cni-pm-stale",
            7,
            "udp",
            5353,
            "10.88.200.200",
            53,
            owner="cni-pm-stale",
        )
        state.port_mappings.append(stale)
        leaks = [
            Leak(
                "veth",
                "vethdead01",
                "host veth on cni-demo0: its peer is in namespace "
                "orphan-ns that no attachment owns",
            ),
            Leak(
                "mapping",
                "inet pycni_portmap cni-pm-stale handle 7",
                "udp/5353 -> 10.88.200.200:53: no live pod has 10.88.200.200",
            ),
            Leak(
                "reservation",
                "/run/pycni-demo/networks/pycni-demo/10.88.0.250",
                "10.88.0.250 is reserved but no attachment is cached for it",
                "pycni-demo",
                "ghost",
                "eth0",
            ),
        ]
    return state, leaks
