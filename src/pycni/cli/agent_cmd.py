"""`pycni agent`: the per-node cluster agent (pod subnet lease + routes between nodes)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "agent",
        help="run the cluster networking agent of this node (foreground)",
        description="Leases this node's pod subnet from the cluster network in etcd (renewed, "
        "with a TTL), writes the subnet file read by the `flannel` CNI plugin, and programs "
        "routes to every other node's subnet (host-gw: via the node's address; vxlan: through "
        "an overlay device). Runs until SIGTERM/SIGINT; the lease then expires by itself.",
    )
    parser.add_argument(
        "--etcd-endpoint",
        "--etcd-endpoints",
        dest="etcd_endpoint",
        default="http://127.0.0.1:2379",
        help="etcd client URL (http://HOST:PORT; the first of a comma-separated list is used)",
    )
    parser.add_argument(
        "--etcd-prefix", default="/pycni.dev/network", help="etcd key prefix of this network"
    )
    parser.add_argument("--network", required=True, help="cluster pod network, e.g. 10.244.0.0/16")
    parser.add_argument(
        "--subnet-len", type=int, default=24, help="prefix length of each node's subnet (24)"
    )
    parser.add_argument("--backend", choices=("host-gw", "vxlan"), default="vxlan")
    parser.add_argument("--iface", default="", help="underlay link (default: the default route's)")
    parser.add_argument("--public-ip", default="", help="this node's underlay address")
    parser.add_argument(
        "--subnet-file", default="/run/flannel/subnet.env", help="where to write subnet.env"
    )
    parser.add_argument("--ttl", type=int, default=60, help="lease TTL in seconds (60)")
    parser.add_argument(
        "--reconcile-interval", type=float, default=10.0, help="seconds between full resyncs"
    )
    parser.add_argument("--vni", type=int, default=1, help="VXLAN network identifier (1)")
    parser.add_argument(
        "--no-ipmasq",
        dest="ipmasq",
        action="store_false",
        help="do not masquerade pod traffic leaving the cluster network",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pycni.cluster import subnet as sn
    from pycni.cluster.agent import Agent, AgentConfig, AgentError

    if os.geteuid() != 0:
        sys.stderr.write("pycni agent: must run as root (it changes routes)\n")
        return 2
    if args.ttl < 2:
        sys.stderr.write("pycni agent: --ttl must be at least 2 seconds\n")
        return 2
    try:
        network = sn.NetworkConfig.parse(args.network, args.subnet_len)
    except sn.SubnetError as exc:
        sys.stderr.write(f"pycni agent: {exc}\n")
        return 2
    config = AgentConfig(
        etcd_endpoint=args.etcd_endpoint.split(",")[0].strip(),
        network=network,
        backend=args.backend,
        etcd_prefix=args.etcd_prefix,
        iface=args.iface,
        public_ip=args.public_ip,
        subnet_file=args.subnet_file,
        ttl=args.ttl,
        reconcile_interval=max(args.reconcile_interval, 0.2),
        ipmasq=args.ipmasq,
        vni=args.vni,
    )
    agent = Agent(config)

    def stop(_signum: int, _frame: object) -> None:
        agent.stop.set()
        agent.wake.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        return agent.run()
    except AgentError as exc:
        sys.stderr.write(f"pycni agent: {exc}\n")
        return 1


if __name__ == "__main__":
    from pycni.cli.main import main

    sys.exit(main(["agent", *sys.argv[1:]]))
