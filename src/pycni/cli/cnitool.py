"""``pycni add|check|del|gc|status <network> <netns>``: cnitool's commands and environment.

Environment, as cnitool: ``NETCONFPATH`` (config dir, default /etc/cni/net.d), ``CNI_PATH``,
``CNI_ARGS`` (``K=V;K2=V2``), ``CAP_ARGS`` (JSON object), ``CNI_IFNAME``.  The container ID
is ``cnitool-`` plus the first 20 hex digits of sha512(absolute netns path), so pycni and
cnitool address the same attachment.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Collection
    from typing import Any

    from pycni.runtime import NetworkConfigList, RuntimeConf

DEFAULT_NET_DIR = "/etc/cni/net.d"
DEFAULT_IFNAME = "eth0"
DEFAULT_CACHE_DIR = "/var/lib/cni"

_VERBS = {
    "add": "add the network to the namespace and print the result",
    "check": "check the network in the namespace (config version 0.4.0 or later)",
    "del": "remove the network from the namespace",
    "gc": "remove every cached attachment of the network, then GC its plugins; alone: "
    "the node-wide GC (as `pycni cleanup`)",
    "status": "ask each plugin of the network whether it is ready (1.1.0 or later)",
}


USAGE = """\
{0}: Add, check, remove, gc or status network interfaces from a network namespace
  {0} add    <net> <netns>
  {0} check  <net> <netns>
  {0} del    <net> <netns>
  {0} gc     <net> <netns>
  {0} status <net> <netns>
"""


class UsageError(Exception):
    """Bad input from the command line or the environment."""


def exact(
    argv: list[str],
    prog: str,
    commands: Collection[str] = (),
    refuse: Callable[[str], int | None] | None = None,
) -> int | None:
    """cnitool's own command line, without argparse: ``VERB NET NETNS [ignored…]``.

    Returns None when ``argv`` is pycni's extended form instead (an option anywhere, another
    pycni command of ``commands``, or ``gc`` alone: the node-wide GC), for argparse. Otherwise
    it does what cnitool v1.3.0 does, byte for byte: fewer than three arguments print its
    usage (exit 1); the config, CAP_ARGS and CNI_ARGS are read, in that order, before the verb
    is looked at, so an unknown verb with a valid network does nothing and exits 0."""
    if any(arg.startswith("-") for arg in argv):
        return None
    if argv and argv[0] not in _VERBS and argv[0] in commands:
        return None
    if argv == ["gc"]:
        return None
    if len(argv) < 3:
        sys.stderr.write(USAGE.format(prog))
        return 1
    refused = refuse(argv[0]) if refuse is not None else None  # not root: say so first
    if refused is not None:
        return refused
    cache_dir = os.environ.get("PYCNI_CACHE_DIR") or DEFAULT_CACHE_DIR
    return _call(argv[0], argv[1], argv[2], None, cache_dir, None)


def register(subparsers: Any) -> None:
    import argparse
    import functools

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-i", "--ifname", help=f"interface name in the namespace (CNI_IFNAME, {DEFAULT_IFNAME})"
    )
    common.add_argument(
        "--cache-dir",
        default=os.environ.get("PYCNI_CACHE_DIR") or DEFAULT_CACHE_DIR,
        help=f"result cache directory (default {DEFAULT_CACHE_DIR})",
    )
    common.add_argument(
        "--timeout", type=float, default=None, help="seconds before running plugins are killed"
    )
    for verb, text in _VERBS.items():
        parser: argparse.ArgumentParser = subparsers.add_parser(
            verb, parents=[common], help=text, description=text
        )
        node_wide = verb == "gc"  # `pycni gc` alone: every network of the node (not in cnitool)
        parser.add_argument(
            "network",
            nargs="?" if node_wide else None,
            help="network name (a config in NETCONFPATH)"
            + (
                "; without NETWORK and NETNS: GC every network and remove leaks"
                if node_wide
                else ""
            ),
        )
        parser.add_argument(
            "netns",
            nargs="?" if node_wide else None,
            help="network namespace path, e.g. /run/netns/pod1",
        )
        if node_wide:
            from pycni.cli.inspect_cmd import add_gc_options

            add_gc_options(parser)
        parser.set_defaults(func=functools.partial(run, verb))


def container_id_for(netns: str) -> str:
    """cnitool's container ID: ``cnitool-`` + hex of the first 10 bytes of sha512(path).

    The interpreter's own SHA-512 where it has one: hashlib loads OpenSSL, a tenth of what
    `pycni add` spends before its first plugin runs."""
    try:
        from _sha2 import sha512  # type: ignore[import-not-found]  # Python 3.12+
    except ImportError:
        try:
            from _sha512 import sha512  # type: ignore[import-not-found]
        except ImportError:
            from hashlib import sha512
    digest: str = sha512(netns.encode()).hexdigest()
    return "cnitool-" + digest[:20]


_GO_KIND = {str: "string", list: "array", bool: "bool"}


def runtime_conf_from_env(netns: str, ifname_flag: str | None) -> RuntimeConf:
    """Build the RuntimeConf from the netns argument and cnitool's environment variables."""
    from pycni.runtime import RuntimeConf
    from pycni.spec.args import parse_pairs
    from pycni.spec.conf import go_unmarshal

    capability_args: dict[str, Any] = {}
    raw_caps = os.environ.get("CAP_ARGS", "")
    if raw_caps:
        try:
            decoded = go_unmarshal(raw_caps)
        except ValueError as err:
            raise UsageError(str(err)) from None
        if not isinstance(decoded, dict | None):
            kind = _GO_KIND.get(type(decoded), "number")
            raise UsageError(
                f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
            )
        capability_args = decoded or {}
    try:
        cni_args = parse_pairs(os.environ.get("CNI_ARGS", ""))
    except ValueError as err:
        raise UsageError(str(err)) from None
    if ifname_flag is not None:
        ifname = ifname_flag
    else:
        ifname = os.environ.get("CNI_IFNAME", DEFAULT_IFNAME)
    netns = os.path.abspath(netns)
    return RuntimeConf(
        container_id=container_id_for(netns),
        netns=netns,
        ifname=ifname,
        args=tuple(cni_args),
        capability_args=capability_args,
    )


def cni_paths() -> list[str]:
    """``CNI_PATH`` split like Go's ``filepath.SplitList`` (empty means no paths)."""
    value = os.environ.get("CNI_PATH", "")
    return value.split(os.pathsep) if value else []


def load_conf(network: str) -> NetworkConfigList:
    """The network as libcni finds it, except that a broken file elsewhere in the directory
    is named in a warning instead of failing every network (docs/cli.md)."""
    from pycni.runtime.confdir import find_network_conf

    conf, broken = find_network_conf(os.environ.get("NETCONFPATH") or DEFAULT_NET_DIR, network)
    for err in broken:
        sys.stderr.write(f"pycni: warning: skipped {err.path}: {err.error}\n")
    return conf


def run(verb: str, args: argparse.Namespace) -> int:
    """The argparse form (``-i``, ``--cache-dir``, ``--timeout``): the same call as cnitool's."""
    if verb == "gc" and args.network is None:
        return _gc_node(args)
    if verb == "gc" and (args.dry_run or args.grace_period != _node_gc_default()):
        sys.stderr.write("pycni: --dry-run and --grace-period apply to `pycni gc` alone\n")
        return 2
    if args.netns is None:
        sys.stderr.write(f"pycni: {verb} needs NETWORK and NETNS\n")
        return 2
    return _call(
        verb, args.network, args.netns, args.ifname, args.cache_dir, args.timeout, extended=True
    )


def _call(
    verb: str,
    network: str,
    netns: str,
    ifname: str | None,
    cache_dir: str,
    timeout: float | None,
    *,
    extended: bool = False,
) -> int:
    """cnitool's main after its argument check, exit code 1 on an error. cnitool's form
    prints the error as cnitool does (its text and a newline); the ``extended`` (argparse)
    form as pycni's commands do, ``pycni: `` first and a hint for an empty CNI_PATH."""
    from pycni.runtime import CNIConfig
    from pycni.spec.errors import CNIError

    try:
        conf = load_conf(network)
        rt = runtime_conf_from_env(netns, ifname)
        cni = CNIConfig(cni_paths(), cache_dir=cache_dir, timeout=timeout)
        if verb == "add":
            result = cni.add_network_list(conf, rt)
            # cnitool's bytes (no newline after the JSON) for pipes and scripts; a terminal
            # gets the line ended, so the prompt or the next output starts on its own line
            sys.stdout.write(result.to_json() + ("\n" if sys.stdout.isatty() else ""))
            sys.stdout.flush()
        elif verb == "check":
            cni.check_network_list(conf, rt)
        elif verb == "del":
            cni.del_network_list(conf, rt)
        elif verb == "gc":
            cni.gc_network_list(conf, None)
        elif verb == "status":
            cni.get_status_network_list(conf)
    except (CNIError, UsageError) as err:
        if not extended:
            sys.stderr.write(f"{err}\n")  # cnitool's bytes
            return 1
        hint = ""
        if not cni_paths() and "no paths provided" in str(err):
            hint = " (CNI_PATH is empty: set it to the directories holding the plugins)"
        sys.stderr.write(f"pycni: {err}{hint}\n")
        return 1
    return 0


def _node_gc_default() -> float:
    from pycni.cli.inspect_cmd import DEFAULT_GRACE_PERIOD

    return DEFAULT_GRACE_PERIOD


def _gc_node(args: argparse.Namespace) -> int:
    """`pycni gc` with no arguments: the node-wide GC that `pycni cleanup` does (DEL of the
    attachments proven gone, then removal of the leaks proven as such; see docs/security.md)."""
    import argparse

    from pycni.cli import inspect_cmd

    node_args = argparse.Namespace(
        netconf_dir=os.environ.get("NETCONFPATH") or DEFAULT_NET_DIR,
        cache_dir=args.cache_dir,
        data_dir=inspect_cmd.DEFAULT_DATA_DIR,
        netns_dir=inspect_cmd.DEFAULT_NETNS_DIR,
        cni_path=os.environ.get("CNI_PATH", ""),
        no_gc=False,
        dry_run=args.dry_run,
        grace_period=args.grace_period,
    )
    return inspect_cmd.run_cleanup(node_args)
