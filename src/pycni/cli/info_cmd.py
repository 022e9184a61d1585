"""``pycni version``, ``pycni validate <net>`` and ``pycni list``: look before you run.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pycni.cli.cnitool import DEFAULT_NET_DIR, cni_paths


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
        help="check network configs before any ADD: typos, values ADD would refuse, plugins",
        description="Checks each network (by name, or a config file by path; default: every "
        "file in NETCONFPATH) as ADD would read it: unknown keys (with the closest known key), "
        "values a plugin or its IPAM would refuse, capabilities no runtime supplies or the "
        "plugin never reads, chains that cannot work, and each plugin found in CNI_PATH "
        "speaking the config's version. Exit 0: clean; 1: errors; 2: warnings only.",
    )
    validate.add_argument("targets", nargs="*", metavar="NETWORK|FILE")
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
    from pycni.runtime.confdir import list_network_confs
    from pycni.spec.errors import CNIError

    directory = os.environ.get("NETCONFPATH") or DEFAULT_NET_DIR
    try:
        entries = _validate_targets(args.targets, directory, list_network_confs)
    except CNIError as err:
        sys.stderr.write(f"pycni: {err}\n")
        return 1
    cni = CNIConfig(cni_paths())
    worst = 0
    for path, conf in entries:
        worst = max(worst, _validate_one(cni, path, conf), key=_severity_rank)
    return worst


def _severity_rank(code: int) -> int:
    return {0: 0, 2: 1, 1: 2}[code]


def _validate_targets(targets: list[str], directory: str, lister: Any) -> list[tuple[str, Any]]:
    """(file, parsed list or its parse error) for each target, in the order given.

    A name is looked up among the files that parse (a broken file elsewhere in the directory
    does not hide it, and is named when it might be the one meant)."""
    from pycni.runtime.confdir import conf_list_from_file
    from pycni.spec.errors import CNIError

    if not targets:
        found = lister(directory)
        if not found:
            raise CNIError(1, f"no network configurations in {directory} (NETCONFPATH)")
        return list(found)
    entries: list[tuple[str, Any]] = []
    listed: list[tuple[str, Any]] | None = None
    for target in targets:
        if os.sep in target or os.path.isfile(target):
            try:
                entries.append((target, conf_list_from_file(target)))
            except CNIError as err:
                entries.append((target, err))
            continue
        if listed is None:
            listed = list(lister(directory))
        match = [(p, c) for p, c in listed if not isinstance(c, CNIError) and c.name == target]
        if match:
            entries.append(match[0])
            continue
        broken = [os.path.basename(p) for p, c in listed if isinstance(c, CNIError)]
        hint = f" (unreadable here: {', '.join(broken)})" if broken else ""
        raise CNIError(1, f'no network "{target}" in {directory} (NETCONFPATH){hint}')
    return entries


def _validate_one(cni: Any, path: str, conf: Any) -> int:
    from pycni.plugins import config_check
    from pycni.spec.errors import CNIError

    if isinstance(conf, CNIError):
        sys.stdout.write(f"{path}: error: cannot be parsed: {conf}\n")
        return 1

    def in_path(plugin_type: str) -> bool:
        return any(os.access(os.path.join(d, plugin_type), os.X_OK) for d in cni_paths())

    findings = list(config_check.check_network(conf, path, plugin_found=in_path))
    for index, err in cni.plugin_problems(conf):
        plugin_type = conf.plugins[index].type
        if not in_path(plugin_type):
            paths = ", ".join(cni_paths()) or "(none)"
            err = CNIError(err.code, f"no plugin `{plugin_type}` in CNI_PATH ({paths})")
            if any(f.path == f"plugins[{index}].type" for f in findings):
                continue  # already said, with the closest type pycni ships
        findings.append(
            config_check.Finding(path, f"plugins[{index}].type", config_check.ERROR, str(err))
        )
    code = config_check.exit_code(findings)
    errors = sum(f.severity == config_check.ERROR for f in findings)
    warnings = len(findings) - errors
    verdict = "ok" if not findings else f"{_count(errors, 'error')}, {_count(warnings, 'warning')}"
    sys.stdout.write(f"network {conf.name} (cniVersion {conf.cni_version}) in {path}: {verdict}\n")
    for finding in findings:
        sys.stdout.write(f"  {finding.severity}: {finding.path}: {finding.message}\n")
    caps = sorted({c for p in conf.plugins for c, on in p.capabilities.items() if on})
    sys.stdout.write(f"plugins: {', '.join(p.type for p in conf.plugins)}\n")
    sys.stdout.write(f"capabilities: {', '.join(caps) if caps else '(none)'}\n")
    return code


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


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
