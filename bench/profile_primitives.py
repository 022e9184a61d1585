#!/usr/bin/env python3
"""The per-call kernel and nftables primitives of an ADD/DEL, timed at 10 and 1000 pods.

Not a test. Pods are attached as in profile_scale.py (in-process, loopback, bridge with
host-local and ipMasq, portmap); then, with the pods in place and quiet, each primitive the
plugins use on the node side is timed on its own (median of 30). If a primitive is flat while an
end-to-end ADD still grows, the growth is not in pycni's calls but in what the kernel does
around them (floods to every bridge port, IPv6 DAD/MLD, RCU, rtnl contention on a busy host).

    sudo .venv/bin/python bench/profile_primitives.py
"""

from __future__ import annotations

import ipaddress
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import profile_scale as ps

from pycni.entrypoints import install as fast_install
from pycni.net import link, thread_sysctl
from pycni.net.netfilter.ipmasq import nft_backend as masq_nft
from pycni.net.netfilter.seam import THREAD
from pycni.net.netlink.client import rtnl
from pycni.net.ns import NetNS
from pycni.playground import create_netns, delete_netns
from pycni.plugins.meta.portmap import nft_backend
from pycni.plugins.meta.portmap.config import PortMapConfig, PortMapping


def median_ms(fn: Callable[[], object], n: int = 30) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 2] * 1000


def paired_ms(
    first: Callable[[], object], second: Callable[[], object], n: int = 30
) -> tuple[float, float]:
    """Medians of ``first`` and ``second`` run alternately (an add, then its undo)."""
    a, b = [], []
    for _ in range(n):
        start = time.perf_counter()
        first()
        a.append(time.perf_counter() - start)
        start = time.perf_counter()
        second()
        b.append(time.perf_counter() - start)
    return sorted(a)[n // 2] * 1000, sorted(b)[n // 2] * 1000


def portmap_probe() -> dict[str, float]:
    """One more attachment's portmap rules (nftables backend) added and deleted."""
    cfg = PortMapConfig(
        network="profnet",
        container_id="probe",
        ifname="eth0",
        mappings=[PortMapping(host_port=19999, container_port=80, protocol="tcp")],
        backend="nftables",
        container_ips={4: ipaddress.ip_interface("10.99.250.250/16")},
    )
    add, delete = paired_ms(
        lambda: nft_backend.BACKEND.add(THREAD, cfg, lambda step: None),
        lambda: nft_backend.BACKEND.delete(THREAD, cfg),
    )
    return {"portmap: add (nftables)": add, "portmap: exact delete": delete}


def primitives() -> dict[str, float]:
    ipn = [ipaddress.ip_interface("10.99.250.250/16")]
    pm = portmap_probe()
    masq = paired_ms(
        lambda: masq_nft.setup(THREAD.nft, ipn, "profnet", "eth0", "probe"),
        lambda: masq_nft.teardown(THREAD.nft, "profnet", "eth0", "probe", ipn),
    )
    with rtnl() as ipr:
        bridge = link.index_of(ipr, "cni0")
        return {
            "bridge addresses (kernel-filtered dump)": median_ms(
                lambda: link.addresses(ipr, bridge)
            ),
            "link lookup by name": median_ms(lambda: ipr.find_link("cni0")),
            "link by index": median_ms(lambda: ipr.link(bridge)),
            "sysctl write (bridge accept_ra)": median_ms(
                lambda: thread_sysctl.write("net/ipv6/conf/cni0/accept_ra", "0")
            ),
            "masquerade set: add": masq[0],
            "masquerade set: exact delete": masq[1],
            **pm,
        }


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="pprim-"))
    fast_install.install(work / "bin", form="inprocess")
    node_name = ps.PREFIX + "node"
    create_netns(node_name)
    node = ps.Node(work / "bin", work / "data")
    live: list[str] = []
    rows: dict[int, dict[str, float]] = {}
    try:
        with NetNS.open(f"/run/netns/{node_name}") as ns, ns.entered():
            for level in (10, 1000):
                while len(live) < level:
                    cid = f"c{len(live) + 1}"
                    node.add(cid)
                    live.append(cid)
                time.sleep(2)  # let the kernel's work around the last ADD settle
                rows[level] = primitives()
            while live:
                node.delete(live.pop())
    finally:
        for cid in live:
            delete_netns(ps.PREFIX + cid)
        delete_netns(node_name)
    print("| primitive, median ms | 10 pods | 1000 pods |\n|---|---|---|")
    for name in rows[10]:
        print(f"| {name} | {rows[10][name]:.3f} | {rows[1000][name]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
