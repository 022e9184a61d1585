"""`pycni doctor`: can this node run pycni? One line per check: ok, warn or fail, and what to do.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# Repeated here (not imported) so that registering stays import-free.
DEFAULT_CNI_PATH = "/opt/cni/bin"
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CACHE_DIR = "/var/lib/cni"
DEFAULT_DATA_DIR = "/var/lib/cni/networks"
DEFAULT_NETNS_DIR = "/run/netns"
DEFAULT_SOCKET = "/run/pycni/pycni.sock"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "doctor",
        help="check that this node can run pycni (kernel, firewall, daemon, dirs, configs, leaks)",
        description="Tries every kernel feature the plugins use in a scratch namespace, checks "
        "the nftables and iptables backends, conntrack, the daemon, the plugin and conf dirs a "
        "runtime would see, every network configuration, and leftovers. Runs in the current "
        "network namespace (use `ip netns exec NODE pycni doctor` for another one). Exit code "
        "1 when any check fails.",
    )
    parser.add_argument(
        "--cni-path",
        "--plugin-dir",
        dest="cni_path",
        help=f"plugin dirs, ':'-separated (default $CNI_PATH or {DEFAULT_CNI_PATH})",
    )
    parser.add_argument(
        "--conf-dir",
        "--netconf-dir",
        dest="conf_dir",
        help=f"network configuration dir (default $NETCONFPATH or {DEFAULT_CONF_DIR})",
    )
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="result cache dir")
    parser.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, help="host-local store of networks without dataDir"
    )
    parser.add_argument("--netns-dir", default=DEFAULT_NETNS_DIR, help="named namespaces dir")
    parser.add_argument(
        "--socket",
        default=None,
        help="the daemon's socket (default: the one the installed entry points forward to, "
        f"else {DEFAULT_SOCKET})",
    )
    parser.add_argument(
        "--runtime-root",
        default="",
        metavar="DIR",
        help="read the runtimes' configs (containers.conf, containerd's config.toml, crio.conf) "
        "under DIR instead of / (a copy of a node's /etc and /usr/share)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def _setting(flag: str | None, env: str, default: str) -> Any:
    from pycni.doctor.node import Setting

    if flag is not None:
        return Setting(flag, "flag")
    if os.environ.get(env):
        return Setting(os.environ[env], f"${env}")
    return Setting(default, "default")


def run(args: argparse.Namespace) -> int:
    from pycni.doctor import kernel, node, report
    from pycni.inspect import runtimes

    if os.geteuid() != 0:
        sys.stderr.write("pycni doctor needs root (it tries kernel features in a namespace)\n")
        return 2
    plugin_dirs = _setting(args.cni_path, "CNI_PATH", DEFAULT_CNI_PATH)
    conf_dir = _setting(args.conf_dir, "NETCONFPATH", DEFAULT_CONF_DIR)
    views = runtimes.find(args.runtime_root)
    checks = report.run_all(
        [
            ("kernel", kernel.check_kernel),
            ("runtimes", lambda: node.check_runtimes(views)),
            ("plugin dirs", lambda: node.check_plugin_dirs(plugin_dirs, views)),
            ("daemon", lambda: node.check_daemon(args.socket, plugin_dirs, views, DEFAULT_SOCKET)),
            ("conf dir", lambda: node.check_conf_dir(conf_dir, plugin_dirs, views)),
            (
                "leaks",
                lambda: node.check_leaks(
                    conf_dir.value, args.cache_dir, args.data_dir, args.netns_dir
                ),
            ),
        ]
    )
    if args.json:
        body = {
            "checks": [
                {"name": c.name, "status": c.status, "detail": c.detail, "fix": c.fix, **c.data}
                for c in checks
            ],
            "summary": report.summary(checks),
        }
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    else:
        sys.stdout.write(report.as_text(checks))
    return 1 if any(c.status == report.FAIL for c in checks) else 0
