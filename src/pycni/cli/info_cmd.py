"""``pycni version``, ``pycni validate <net>`` and ``pycni list``: look before you run."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pycni.cli.cnitool import DEFAULT_NET_DIR, cni_paths, load_conf

__all__ = ["register"]


def register(subparsers: Any) -> None:
    version = subparsers.add_parser(
        "version", help="print pycni's version and the CNI spec versions it speaks"
    )
    version.add_argument(
        "--plugin", metavar="TYPE", help="ask plugin TYPE (found in CNI_PATH) for its versions"
    )
    version.set_defaults(func=run_version)

    validate = subparsers.add_parser(
        "validate",
        help="check that a network's plugins exist and support its version",
        description="Loads the network from NETCONFPATH, finds each plugin in CNI_PATH and "
        "asks it for its versions; prints the capabilities the network enables.",
    )
    validate.add_argument("network")
    validate.set_defaults(func=run_validate)

    listing = subparsers.add_parser(
        "list", help="list the networks in the config directory (NETCONFPATH)"
    )
    listing.add_argument(
        "--conf-dir", help=f"config directory (default NETCONFPATH or {DEFAULT_NET_DIR})"
    )
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(func=run_list)


def run_version(args: argparse.Namespace) -> int:
    from pycni import __version__
    from pycni.spec import version

    if args.plugin is None:
        sys.stdout.write(f"pycni {__version__}\n")
        sys.stdout.write(f"CNI spec versions: {', '.join(version.ALL)}\n")
        return 0
    from pycni.runtime import CNIConfig
    from pycni.spec.errors import CNIError

    try:
        info = CNIConfig(cni_paths()).get_version_info(args.plugin)
    except CNIError as err:
        sys.stderr.write(f"pycni: {err}\n")
        return 1
    out = {"cniVersion": info.cni_version, "supportedVersions": list(info.supported_versions)}
    sys.stdout.write(json.dumps(out, indent=4) + "\n")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from pycni.runtime import CNIConfig
    from pycni.spec.errors import CNIError

    try:
        conf = load_conf(args.network)
        caps = CNIConfig(cni_paths()).validate_network_list(conf)
    except CNIError as err:
        sys.stderr.write(f"pycni: {err}\n")
        return 1
    plugins = ", ".join(p.type for p in conf.plugins)
    sys.stdout.write(f"network {conf.name} (cniVersion {conf.cni_version}): ok\n")
    sys.stdout.write(f"plugins: {plugins}\n")
    sys.stdout.write(f"capabilities: {', '.join(caps) if caps else '(none)'}\n")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from pycni.runtime.confdir import list_network_confs
    from pycni.spec.errors import CNIError

    directory = args.conf_dir or os.environ.get("NETCONFPATH") or DEFAULT_NET_DIR
    try:
        entries = list_network_confs(directory)
    except CNIError as err:
        sys.stderr.write(f"pycni: {err}\n")
        return 1
    rows: list[dict[str, Any]] = []
    for path, conf in entries:
        if isinstance(conf, CNIError):
            rows.append({"file": path, "error": str(conf)})
        else:
            rows.append(
                {
                    "file": path,
                    "name": conf.name,
                    "cniVersion": conf.cni_version,
                    "plugins": [p.type for p in conf.plugins],
                }
            )
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=4) + "\n")
        return 0
    if not rows:
        sys.stdout.write(f"no network configurations in {directory}\n")
        return 0
    for row in rows:
        if "error" in row:
            sys.stdout.write(f"{os.path.basename(row['file'])}: error: {row['error']}\n")
        else:
            plugins = ",".join(row["plugins"])
            sys.stdout.write(
                f"{row['name']}\t{row['cniVersion'] or '-'}\t{plugins}\t{row['file']}\n"
            )
    return 0
