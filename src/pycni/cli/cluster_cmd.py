"""`pycni cluster up|down|status`: a multi-node pod network (etcd, agents, pods) on one machine.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

DEFAULT_STATE_DIR = "/run/pycni-cluster"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="run a whole multi-node cluster network on this machine (up/down/status)",
        description="Nodes are network namespaces joined by an underlay bridge, with etcd on "
        "the underlay; each node runs `pycni agent`, pods attach through the `flannel` CNI "
        "plugin. Nothing outside the cluster's namespaces and state directory is touched.",
    )
    parser.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help=f"where the cluster keeps its state (default {DEFAULT_STATE_DIR})",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    up = verbs.add_parser("up", help="create the cluster and leave it running")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (3)")
    up.add_argument("--pods-per-node", type=int, default=2, help="pods on each node (2)")
    up.add_argument("--backend", choices=("host-gw", "vxlan", "wireguard", "ipip"), default="vxlan")
    up.add_argument("--network", default="10.244.0.0/16", help="cluster pod network")
    up.add_argument("--subnet-len", type=int, default=24, help="node subnet prefix length")
    up.add_argument("--underlay", default="10.99.0.0/24", help="the nodes' own network")
    up.add_argument("--prefix", default="pycni-cl-", help="name prefix of the namespaces")
    up.add_argument("--ttl", type=int, default=60, help="lease TTL of the agents (seconds)")
    up.add_argument(
        "--reconcile-interval", type=float, default=10.0, help="agents' resync period (s)"
    )
    family = up.add_mutually_exclusive_group()
    family.add_argument(
        "--dual-stack",
        dest="family",
        action="store_const",
        const="dual",
        help="IPv4 and IPv6 pod networks (and underlay)",
    )
    family.add_argument(
        "--ipv6-only",
        dest="family",
        action="store_const",
        const="ipv6",
        help="IPv6 pod network and underlay only (etcd on the IPv6 underlay)",
    )
    up.set_defaults(family="ipv4")
    up.add_argument("--ipv6-network", default="fd10:244::/56", help="IPv6 pod network")
    up.add_argument("--ipv6-subnet-len", type=int, default=64, help="IPv6 node subnet length")
    up.set_defaults(func=run_up)

    down = verbs.add_parser("down", help="remove the cluster (processes, namespaces, state)")
    down.set_defaults(func=run_down)

    status = verbs.add_parser("status", help="nodes, leases, routes and a ping matrix")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--no-ping", action="store_true", help="skip the ping matrix")
    status.set_defaults(func=run_status)


class _Progress:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        sys.stdout.write(f"[{time.monotonic() - self.start:6.2f}s] {message}\n")
        sys.stdout.flush()


def _need_root(verb: str) -> bool:
    if os.geteuid() != 0:
        sys.stderr.write(f"pycni cluster {verb}: needs root (it creates network namespaces)\n")
        return False
    return True


def run_up(args: argparse.Namespace) -> int:
    from pycni.playground import cluster

    if not _need_root("up"):
        return 2
    try:
        state = cluster.new_state(args.state_dir, args.prefix)
    except cluster.ClusterError as exc:
        sys.stderr.write(f"pycni cluster up: {exc}\n")
        return 2
    opts = cluster.UpOptions(
        nodes=args.nodes,
        pods_per_node=args.pods_per_node,
        backend=args.backend,
        network=args.network,
        subnet_len=args.subnet_len,
        underlay=args.underlay,
        ttl=args.ttl,
        reconcile_interval=args.reconcile_interval,
        family=args.family,
        ipv6_network=args.ipv6_network,
        ipv6_subnet_len=args.ipv6_subnet_len,
    )
    progress = _Progress()
    try:
        cluster.up(state, opts, progress)
    except cluster.ClusterError as exc:
        sys.stderr.write(f"pycni cluster up: {exc}\n")
        progress("removing the half-made cluster")
        cluster.down(state, progress)
        return 1
    except BaseException:
        cluster.down(state)
        raise
    progress(f"cluster up (state in {state.root}); `pycni cluster status` shows it")
    return 0


def _load(args: argparse.Namespace) -> Any:
    from pycni.playground import cluster

    try:
        return cluster.ClusterState.load(args.state_dir)
    except (OSError, ValueError, TypeError):
        return None


def run_down(args: argparse.Namespace) -> int:
    from pycni.playground import cluster

    if not _need_root("down"):
        return 2
    state = _load(args)
    if state is None:
        sys.stdout.write(f"no cluster in {args.state_dir}: nothing to remove\n")
        return 0
    problems = cluster.down(state, _Progress())
    for problem in problems:
        sys.stderr.write(f"warning: {problem}\n")
    sys.stdout.write("cluster removed\n")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from pycni.playground import cluster_status as status

    if not _need_root("status"):
        return 2
    state = _load(args)
    if state is None:
        sys.stderr.write(f"pycni cluster status: no cluster in {args.state_dir}\n")
        return 1
    report = status.collect(state, with_ping=not args.no_ping)
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        status.render(report, sys.stdout)
    return 0 if report.all_pings_ok and not report.errors else 1
