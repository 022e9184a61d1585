#!/usr/bin/env python3
"""portmap ADD/DEL cost with 10, 200 and 500 existing mappings: pycni vs the Go reference.

Not a test. In a private node namespace, existing attachments are installed directly
(through our backends, which write the same iptables rules the Go plugin writes), then one
more attachment is ADDed and DELeted REPS times by:
  - pycni nftables, exec'd (an in-process entry point: Python start-up included),
  - pycni nftables, warm (the plugin called in-process, as the daemon runs it),
  - pycni iptables, warm,
  - Go portmap 1.1.1 (iptables, the system's iptables-nft), exec'd.
Median milliseconds are printed as a table (and as JSON with --json FILE).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.entrypoints import install as fast_install  # noqa: E402
from pycni.net.netfilter import iptables, iptables_script  # noqa: E402
from pycni.net.netfilter.seam import THREAD  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402
from pycni.playground import create_netns, delete_netns  # noqa: E402
from pycni.plugins.meta.portmap import iptables_backend, nft_backend  # noqa: E402
from pycni.plugins.meta.portmap.config import PortMapConfig, PortMapping  # noqa: E402
from pycni.plugins.meta.portmap.plugin import PLUGIN  # noqa: E402
from pycni.skel.base import Request  # noqa: E402

GO_PORTMAP = Path("/usr/lib/cni/portmap")
NET = "benchnet"
LEVELS = (10, 200, 500)
PREFIX = f"pmbench{os.getpid() % 10000}-"


def fake(i: int, backend: str) -> PortMapConfig:
    return PortMapConfig(
        network=NET,
        container_id=f"existing-{i:04d}",
        ifname="eth0",
        mappings=[PortMapping(20000 + i, 80, "tcp")],
        backend=backend,
        container_ips={4: ipaddress.ip_interface(f"10.99.{1 + i // 250}.{2 + i % 250}/16")},
    )


def populate_iptables(start: int, stop: int) -> None:
    """Install attachments start..stop-1 in one restore (the same rules the Go plugin makes)."""
    saved = iptables.save("nat", 4)
    declare: list[str] = []
    lines: list[str] = []
    for i in range(start, stop):
        text = iptables_backend.add_script(fake(i, "iptables"), 4, saved)
        for line in text.splitlines()[1:-1]:
            (declare if line.startswith(":") else lines).append(line)
        saved = iptables_script.parse_save(
            text.replace("-I POSTROUTING 1", "-A POSTROUTING"), "nat"
        )
        saved.chains |= {"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"}
    body = [line[1:].split()[0] for line in dict.fromkeys(declare)]
    iptables.restore(iptables_script.script("nat", body, lines), 4)


def conf(mapping: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "portmap",
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/x"}],
            "ips": [{"address": "10.99.0.2/16", "interface": 0}],
        },
    }
    if mapping:
        out["runtimeConfig"] = {
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
        }
    return out


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def exec_plugin(binary: Path, command: str, config: dict[str, Any], netns: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "bench-pod",
        "CNI_NETNS": netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(binary.parent),
    }
    proc = subprocess.run(
        [str(binary)], input=json.dumps(config).encode(), env=env, capture_output=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} {command}: {proc.stdout.decode()} {proc.stderr.decode()}")


def warm(command: str, config: dict[str, Any], netns: str) -> None:
    req = Request(command, "bench-pod", netns, "eth0", "", [], config, b"", {})
    if command == "ADD":
        PLUGIN.add(req)
    else:
        PLUGIN.delete(req)


def measure(reps: int, add: Callable[[], None], delete: Callable[[], None]) -> tuple[float, float]:
    adds, dels = [], []
    for _ in range(reps):
        adds.append(timed(add))
        dels.append(timed(delete))
    return statistics.median(adds), statistics.median(dels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    node, pod = PREFIX + "node", PREFIX + "pod"
    tmp = Path(tempfile.mkdtemp(prefix="pmbench-"))
    results: dict[str, dict[int, tuple[float, float]]] = {}
    for name in (node, pod):
        create_netns(name)
    try:
        subprocess.run(
            ["ip", "-n", node, "link", "add", "bm0", "type", "veth", "peer", "name", "bm1"],
            check=True,
        )
        subprocess.run(["ip", "-n", node, "addr", "add", "10.99.0.1/16", "dev", "bm0"], check=True)
        subprocess.run(["ip", "-n", node, "link", "set", "bm0", "up"], check=True)
        fast_install.install(tmp, form="inprocess")
        ours = tmp / "portmap"
        netns = f"/run/netns/{pod}"
        nft_conf = conf(True)
        ipt_conf = {**conf(True), "backend": "iptables"}
        with NetNS.open(f"/run/netns/{node}") as handle, handle.entered():
            have = 0
            for level in LEVELS:
                for i in range(have, level):
                    nft_backend.BACKEND.add(THREAD, fake(i, "nftables"), lambda step: None)
                populate_iptables(have, level)
                have = level
                rows = {
                    "pycni nftables, exec": measure(
                        args.reps,
                        lambda: exec_plugin(ours, "ADD", nft_conf, netns),
                        lambda: exec_plugin(ours, "DEL", nft_conf, netns),
                    ),
                    "pycni nftables, warm": measure(
                        args.reps,
                        lambda: warm("ADD", nft_conf, netns),
                        lambda: warm("DEL", nft_conf, netns),
                    ),
                    "pycni iptables, warm": measure(
                        args.reps,
                        lambda: warm("ADD", ipt_conf, netns),
                        lambda: warm("DEL", ipt_conf, netns),
                    ),
                    "Go portmap 1.1.1, exec": measure(
                        args.reps,
                        lambda: exec_plugin(GO_PORTMAP, "ADD", conf(True), netns),
                        lambda: exec_plugin(GO_PORTMAP, "DEL", conf(True), netns),
                    ),
                }
                for label, value in rows.items():
                    results.setdefault(label, {})[level] = value
                print(f"measured with {level} existing mappings", file=sys.stderr)
    finally:
        for name in (node, pod):
            delete_netns(name)

    header = "| portmap, median ms | " + " | ".join(f"ADD @{n} | DEL @{n}" for n in LEVELS) + " |"
    print(header)
    print("|" + "---|" * (1 + 2 * len(LEVELS)))
    for label, per_level in results.items():
        cells = " | ".join(f"{per_level[n][0]:.1f} | {per_level[n][1]:.1f}" for n in LEVELS)
        print(f"| {label} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
