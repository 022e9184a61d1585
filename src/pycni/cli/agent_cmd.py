"""`pycni agent`: the per-node cluster agent (pod subnet lease + routes between nodes).

Options follow flannel's names; each etcd and node option can also come from the
environment as flannel's ``FLANNELD_<OPTION>`` (``--etcd-password`` is best given as
``FLANNELD_ETCD_PASSWORD``: a command line is readable by every user of the machine).
``--health`` answers whether this node can take pods now (exit 0) or not (exit 1, and why).
The cluster network comes from the flags, from flannel's net-conf.json (``--net-conf``), or,
when neither gives it, from etcd's ``<prefix>/config`` key as flanneld's etcd mode takes it;
never from two: a network flag next to ``--net-conf`` is refused, and an agent whose flags or
file disagree with the key refuses to start. ``--check-config`` checks what the agent would
start with (the key's config, read once, when no flags or file give it) and starts nothing.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

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
    "net_conf": "FLANNELD_NET_CONFIG_PATH",
}
# the network's flags (argparse dest -> flag, default): the net-conf file's business
NETWORK_FLAGS: dict[str, tuple[str, object]] = {
    "network": ("--network", None),
    "subnet_len": ("--subnet-len", 24),
    "ipv6_network": ("--ipv6-network", None),
    "ipv6_subnet_len": ("--ipv6-subnet-len", 64),
    "backend": ("--backend", "vxlan"),
    "vni": ("--vni", 1),
    "wireguard_listen_port": ("--wireguard-listen-port", 0),
    "wireguard_keepalive": ("--wireguard-keepalive", 0),
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
    parser.add_argument("--subnet-len", type=int, help="prefix length of each node's subnet (24)")
    parser.add_argument(
        "--ipv6-network",
        help="IPv6 cluster pod network, e.g. fd10:244::/56 (with --network: dual-stack; "
        "alone: IPv6-only)",
    )
    parser.add_argument("--ipv6-subnet-len", type=int, help="IPv6 node subnet length (64)")
    parser.add_argument("--backend", choices=("host-gw", "vxlan", "wireguard", "ipip"))
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
    parser.add_argument("--vni", type=int, help="VXLAN network identifier (1)")
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
        help="wireguard: UDP port (51820 for IPv4, 51821 for IPv6)",
    )
    parser.add_argument(
        "--wireguard-keepalive",
        type=int,
        help="wireguard: persistent keepalive to each peer in seconds (0: none)",
    )
    parser.add_argument(
        "--no-ipmasq",
        dest="ipmasq",
        action="store_false",
        help="do not masquerade pod traffic leaving the cluster network",
    )
    parser.add_argument(
        "--net-conf",
        "--net-config-path",
        dest="net_conf",
        help="flannel's net-conf.json: the cluster network and backend, read with flannel's "
        "meaning (instead of --network, --subnet-len, --ipv6-network, --ipv6-subnet-len, "
        "--backend, --vni, --wireguard-*) [env FLANNELD_NET_CONFIG_PATH]",
    )
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="do not run: check the configuration (e.g. --net-conf FILE) and exit 0 when "
        "it is usable, 2 with every problem when not",
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


class UsageError(ValueError):
    """The options cannot start an agent (the message says why)."""


def _flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    from pycni.cluster import subnet as sn
    from pycni.cluster.netconf import MAX_VNI

    for dest, (_flag, default) in NETWORK_FLAGS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    if not args.network and not args.ipv6_network:
        raise UsageError(
            "give --network (e.g. 10.244.0.0/16), --ipv6-network or both, or --net-conf FILE"
        )
    if not 0 <= args.wireguard_listen_port <= 65535 or not 0 <= args.wireguard_keepalive <= 65535:
        raise UsageError("--wireguard-listen-port and --wireguard-keepalive take 0..65535")
    if not 0 <= args.vni <= MAX_VNI:
        raise UsageError(f"--vni takes 0..{MAX_VNI}")
    try:
        network = sn.ClusterConfig(
            sn.NetworkConfig.parse(args.network, args.subnet_len) if args.network else None,
            sn.NetworkConfig.parse(args.ipv6_network, args.ipv6_subnet_len, version=6)
            if args.ipv6_network
            else None,
        )
    except sn.SubnetError as exc:
        raise UsageError(str(exc)) from None
    return {
        "network": network,
        "backend": args.backend,
        "vni": args.vni,
        "wireguard_port": args.wireguard_listen_port,
        "wireguard_keepalive": args.wireguard_keepalive,
    }


def network_settings(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The AgentConfig fields that define the network (from the flags or the net-conf
    file, never both), and warnings to show."""
    from pycni.cluster import netconf

    if not args.net_conf and not args.network and not args.ipv6_network:
        given = [f for dest, (f, _) in NETWORK_FLAGS.items() if getattr(args, dest) is not None]
        if given:
            raise UsageError(
                f"{', '.join(given)} without --network/--ipv6-network: give the network too, "
                "or no network flag at all and the agent takes etcd's config key"
            )
        return {"network": None}, []  # etcd's <prefix>/config gives it (see run)
    if not args.net_conf:
        return _flag_settings(args), []
    given = [flag for dest, (flag, _) in NETWORK_FLAGS.items() if getattr(args, dest) is not None]
    if given:
        raise UsageError(
            f"{', '.join(given)} and --net-conf both define the network: the net-conf file "
            "alone does; drop the flag or the file"
        )
    try:
        conf = netconf.load(args.net_conf)
    except netconf.NetConfError as exc:
        where = netconf.show(args.net_conf)
        raise UsageError("\n".join(f"net-conf {where}: {p}" for p in exc.problems)) from None
    settings = {
        "network": conf.network,
        "backend": conf.backend,
        "vni": conf.vni,
        "vxlan_port": conf.vxlan_port,
        "underlay_mtu": conf.underlay_mtu,
        "wireguard_port": conf.wireguard_port,
        "wireguard_keepalive": conf.wireguard_keepalive,
    }
    settings["network_source"] = f"net-conf {netconf.show(args.net_conf)}"
    return settings, [f"net-conf: {w}" for w in conf.warnings]


def _etcd_settings(args: argparse.Namespace, credentials: Any) -> dict[str, Any]:
    """For --check-config: the settings etcd's config key gives now (read once)."""
    from pycni.cluster import etcdconf
    from pycni.cluster.etcd import Etcd, EtcdError

    key = f"{args.etcd_prefix.rstrip('/')}/config"
    try:
        conf = etcdconf.read(Etcd(args.etcd_endpoints, credentials=credentials), key)
    except etcdconf.ConfigMissing:
        raise UsageError(
            f"no network flags, no --net-conf and etcd has no {key}: give one of them"
        ) from None
    except etcdconf.ConfigError as exc:
        raise UsageError("\n".join(exc.problems)) from None
    except EtcdError as exc:
        raise UsageError(
            f"no network flags and no --net-conf FILE: the config is etcd's {key}, which "
            f"cannot be read: {exc}"
        ) from None
    for warning in conf.warnings:
        sys.stderr.write(f"pycni agent: warning: {key}: {warning}\n")
    return {
        "network": conf.network,
        "backend": conf.backend,
        "vni": conf.vni,
        "vxlan_port": conf.vxlan_port,
        "underlay_mtu": conf.underlay_mtu,
    }


def _describe(settings: dict[str, Any]) -> str:
    from pycni.cluster.subnet import ClusterConfig

    network: ClusterConfig = settings["network"]
    text = network.describe()
    for family in network.families:
        if family.subnet_min is not None or family.subnet_max is not None:
            text += f" (IPv{family.version} leases {family.first} to {family.last})"
    text += f"; backend {settings['backend']}"
    if settings["backend"] == "vxlan":
        text += f" (VNI {settings['vni']}, port {settings.get('vxlan_port', 8472)})"
    if settings.get("underlay_mtu"):
        text += f"; link MTU taken as {settings['underlay_mtu']}"
    return text


def run(args: argparse.Namespace) -> int:
    from pycni.cluster.agent import Agent, AgentConfig, AgentError
    from pycni.cluster.etcd import EtcdCredentials

    resolve(args)
    if args.health:
        return health(args.subnet_file)
    credentials = EtcdCredentials(
        cafile=args.etcd_cafile,
        certfile=args.etcd_certfile,
        keyfile=args.etcd_keyfile,
        username=args.etcd_username,
        password=args.etcd_password,
    )
    try:
        settings, warnings = network_settings(args)
        if args.ttl < 2:
            raise UsageError("--ttl must be at least 2 seconds")
        for warning in warnings:
            sys.stderr.write(f"pycni agent: warning: {warning}\n")
        if args.check_config and settings["network"] is None:
            settings = _etcd_settings(args, credentials)
    except UsageError as exc:
        for line in str(exc).splitlines():
            sys.stderr.write(f"pycni agent: {line}\n")
        return 2
    if args.check_config:
        sys.stdout.write(f"ok: {_describe(settings)}\n")
        return 0
    if os.geteuid() != 0:
        sys.stderr.write("pycni agent: must run as root (it changes routes)\n")
        return 2
    if "--etcd-password" in sys.argv or any(a.startswith("--etcd-password=") for a in sys.argv):
        sys.stderr.write(
            "pycni agent: warning: a password on the command line is visible to every user; "
            "use FLANNELD_ETCD_PASSWORD\n"
        )
    config = AgentConfig(
        etcd_endpoints=args.etcd_endpoints,
        etcd_credentials=credentials,
        **settings,
        etcd_prefix=args.etcd_prefix,
        iface=args.iface,
        public_ip=args.public_ip,
        public_ipv6=args.public_ipv6,
        subnet_file=args.subnet_file,
        ttl=args.ttl,
        reconcile_interval=max(args.reconcile_interval, 0.2),
        ipmasq=args.ipmasq,
        mtu=args.mtu,
        wireguard_key_file=args.wireguard_key_file,
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
        for line in str(exc).splitlines():
            sys.stderr.write(f"pycni agent: {line}\n")
        return 1


if __name__ == "__main__":
    from pycni.cli.main import main

    sys.exit(main(["agent", *sys.argv[1:]], modules=("pycni.cli.agent_cmd",)))
