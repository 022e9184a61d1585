"""`pycni agent`: the per-node cluster agent (pod subnet lease + routes between nodes).

Options follow flannel's names; each etcd and node option can also come from the
environment as flannel's ``FLANNELD_<OPTION>`` (``--etcd-password`` is best given as
``FLANNELD_ETCD_PASSWORD``: a command line is readable by every user of the machine).
``--health`` answers whether this node can take pods now (exit 0) or not (exit 1, and why).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

__all__ = ["register", "resolve"]

DEFAULT_ENDPOINT = "http://127.0.0.1:2379"
DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
DEFAULT_ETCD_PREFIX = "/pycni.dev/network"

# option (argparse dest) -> flannel's environment variable
ENVIRONMENT = {
    "etcd_endpoints": "FLANNELD_ETCD_ENDPOINTS",
    "etcd_prefix": "FLANNELD_ETCD_PREFIX",
    "etcd_cafile": "FLANNELD_ETCD_CAFILE",
    "etcd_certfile": "FLANNELD_ETCD_CERTFILE",
    "etcd_keyfile": "FLANNELD_ETCD_KEYFILE",
    "etcd_username": "FLANNELD_ETCD_USERNAME",
    "etcd_password": "FLANNELD_ETCD_PASSWORD",
    "iface": "FLANNELD_IFACE",
    "public_ip": "FLANNELD_PUBLIC_IP",
    "public_ipv6": "FLANNELD_PUBLIC_IPV6",
    "subnet_file": "FLANNELD_SUBNET_FILE",
    "wireguard_key_file": "WIREGUARD_KEY_FILE",
}
DEFAULTS = {
    "etcd_endpoints": DEFAULT_ENDPOINT,
    "etcd_prefix": DEFAULT_ETCD_PREFIX,
    "subnet_file": DEFAULT_SUBNET_FILE,
}


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "agent",
        help="run the cluster networking agent of this node (foreground)",
        description="Leases this node's pod subnet from the cluster network in etcd (renewed, "
        "with a TTL), writes the subnet file read by the `flannel` CNI plugin, and programs "
        "routes to every other node's subnet (host-gw: via the node's address; vxlan: through "
        "an overlay device; wireguard: an encrypted tunnel; ipip: IPv4 in IPv4). "
        "Runs until SIGTERM/SIGINT; the lease then expires by itself. "
        "Options marked [env] may be given as FLANNELD_<OPTION> instead.",
    )
    parser.add_argument(
        "--etcd-endpoints",
        "--etcd-endpoint",
        dest="etcd_endpoints",
        help=f"etcd client URLs, comma-separated http(s)://HOST:PORT; the next is tried when "
        f"one is down ({DEFAULT_ENDPOINT}) [env]",
    )
    parser.add_argument("--etcd-prefix", help=f"etcd key prefix ({DEFAULT_ETCD_PREFIX}) [env]")
    parser.add_argument("--etcd-cafile", help="CA bundle that signs etcd's certificate [env]")
    parser.add_argument("--etcd-certfile", help="client certificate for etcd [env]")
    parser.add_argument("--etcd-keyfile", help="key of the client certificate [env]")
    parser.add_argument("--etcd-username", help="etcd user (needs https) [env]")
    parser.add_argument(
        "--etcd-password", help="etcd password (prefer FLANNELD_ETCD_PASSWORD) [env]"
    )
    parser.add_argument("--network", help="IPv4 cluster pod network, e.g. 10.244.0.0/16")
    parser.add_argument(
        "--subnet-len", type=int, default=24, help="prefix length of each node's subnet (24)"
    )
    parser.add_argument(
        "--ipv6-network",
        help="IPv6 cluster pod network, e.g. fd10:244::/56 (with --network: dual-stack; "
        "alone: IPv6-only)",
    )
    parser.add_argument(
        "--ipv6-subnet-len", type=int, default=64, help="IPv6 node subnet length (64)"
    )
    parser.add_argument(
        "--backend", choices=("host-gw", "vxlan", "wireguard", "ipip"), default="vxlan"
    )
    parser.add_argument("--iface", help="underlay link (default: the default route's) [env]")
    parser.add_argument("--public-ip", help="this node's IPv4 underlay address [env]")
    parser.add_argument("--public-ipv6", help="this node's IPv6 underlay address [env]")
    parser.add_argument(
        "--subnet-file", help=f"where to write subnet.env ({DEFAULT_SUBNET_FILE}) [env]"
    )
    parser.add_argument("--ttl", type=int, default=60, help="lease TTL in seconds (60)")
    parser.add_argument(
        "--reconcile-interval", type=float, default=10.0, help="seconds between full resyncs"
    )
    parser.add_argument("--vni", type=int, default=1, help="VXLAN network identifier (1)")
    parser.add_argument(
        "--mtu",
        type=int,
        default=0,
        help="pod MTU (default: the underlay's minus the backend's overhead: vxlan 50 over "
        "IPv4, 70 over IPv6; host-gw 0)",
    )
    parser.add_argument(
        "--wireguard-key-file",
        help="wireguard: the node's private key, made (0600) when missing "
        "(WIREGUARD_KEY_FILE, else /run/flannel/wgkey) [env]",
    )
    parser.add_argument(
        "--wireguard-listen-port",
        type=int,
        default=0,
        help="wireguard: UDP port (51820 for IPv4, 51821 for IPv6)",
    )
    parser.add_argument(
        "--wireguard-keepalive",
        type=int,
        default=0,
        help="wireguard: persistent keepalive to each peer in seconds (0: none)",
    )
    parser.add_argument(
        "--no-ipmasq",
        dest="ipmasq",
        action="store_false",
        help="do not masquerade pod traffic leaving the cluster network",
    )
    parser.add_argument(
        "--health",
        action="store_true",
        help="do not run: say whether this node is ready for pods (exit 0) or not (exit 1)",
    )
    parser.set_defaults(func=run)


def resolve(args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
    """Fill options not given on the command line from FLANNELD_* variables, then defaults."""
    env = os.environ if environ is None else environ
    for dest, variable in ENVIRONMENT.items():
        if getattr(args, dest) is None:
            setattr(args, dest, env.get(variable) or DEFAULTS.get(dest, ""))


def health(subnet_file: str) -> int:
    from pycni.cluster import subnet as sn

    state = sn.readiness(subnet_file)
    sys.stdout.write(f"{'ready' if state.ready else 'not ready'}: {state.reason}\n")
    return 0 if state.ready else 1


def run(args: argparse.Namespace) -> int:
    from pycni.cluster import subnet as sn
    from pycni.cluster.agent import Agent, AgentConfig, AgentError
    from pycni.cluster.etcd import EtcdCredentials

    resolve(args)
    if args.health:
        return health(args.subnet_file)
    if os.geteuid() != 0:
        sys.stderr.write("pycni agent: must run as root (it changes routes)\n")
        return 2
    if not args.network and not args.ipv6_network:
        sys.stderr.write(
            "pycni agent: give --network (e.g. 10.244.0.0/16), --ipv6-network or both\n"
        )
        return 2
    if not 0 <= args.wireguard_listen_port <= 65535 or not 0 <= args.wireguard_keepalive <= 65535:
        sys.stderr.write(
            "pycni agent: --wireguard-listen-port and --wireguard-keepalive take 0..65535\n"
        )
        return 2
    if args.ttl < 2:
        sys.stderr.write("pycni agent: --ttl must be at least 2 seconds\n")
        return 2
    if "--etcd-password" in sys.argv or any(a.startswith("--etcd-password=") for a in sys.argv):
        sys.stderr.write(
            "pycni agent: warning: a password on the command line is visible to every user; "
            "use FLANNELD_ETCD_PASSWORD\n"
        )
    try:
        network = sn.ClusterConfig(
            sn.NetworkConfig.parse(args.network, args.subnet_len) if args.network else None,
            sn.NetworkConfig.parse(args.ipv6_network, args.ipv6_subnet_len, version=6)
            if args.ipv6_network
            else None,
        )
    except sn.SubnetError as exc:
        sys.stderr.write(f"pycni agent: {exc}\n")
        return 2
    config = AgentConfig(
        etcd_endpoints=args.etcd_endpoints,
        etcd_credentials=EtcdCredentials(
            cafile=args.etcd_cafile,
            certfile=args.etcd_certfile,
            keyfile=args.etcd_keyfile,
            username=args.etcd_username,
            password=args.etcd_password,
        ),
        network=network,
        backend=args.backend,
        etcd_prefix=args.etcd_prefix,
        iface=args.iface,
        public_ip=args.public_ip,
        public_ipv6=args.public_ipv6,
        subnet_file=args.subnet_file,
        ttl=args.ttl,
        reconcile_interval=max(args.reconcile_interval, 0.2),
        ipmasq=args.ipmasq,
        vni=args.vni,
        mtu=args.mtu,
        wireguard_key_file=args.wireguard_key_file,
        wireguard_port=args.wireguard_listen_port,
        wireguard_keepalive=args.wireguard_keepalive,
    )
    try:
        agent = Agent(config)
    except AgentError as exc:
        sys.stderr.write(f"pycni agent: {exc}\n")
        return 2

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

    sys.exit(main(["agent", *sys.argv[1:]], modules=("pycni.cli.agent_cmd",)))
