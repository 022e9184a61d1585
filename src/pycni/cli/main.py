"""The ``pycni`` command: a cnitool-compatible front end plus pycni's own commands.

Each command group lives in its own module exposing ``register(subparsers)``; the module's
sub-parsers set ``func(args) -> int``.  To add a group, append its module name to
``COMMAND_MODULES`` (only modules that exist).  Command modules import heavy code inside
their command functions so that starting ``pycni`` stays cheap.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["COMMAND_MODULES", "COMMAND_OWNERS", "build_parser", "main", "modules_for"]

COMMAND_MODULES: tuple[str, ...] = (
    "pycni.cli.cnitool",
    "pycni.cli.info_cmd",
    "pycni.cli.plugins_cmd",
    "pycni.cli.daemon_cmd",
    "pycni.cli.demo_cmd",
    "pycni.cli.inspect_cmd",
    "pycni.cli.cluster_cmd",
    "pycni.cli.agent_cmd",
    "pycni.cli.dhcp_cmd",
    "pycni.cli.doctor_cmd",
    "pycni.cli.migrate_cmd",
)

# Which module registers each command, so that `pycni add …` builds (and imports) only
# cnitool's parser: building all ten costs more than the plugin chain of an ADD through the
# daemon. tests/unit/test_cli.py checks this table against what the modules register.
COMMAND_OWNERS: dict[str, str] = {
    **dict.fromkeys(("add", "check", "del", "gc", "status"), "pycni.cli.cnitool"),
    **dict.fromkeys(("version", "validate", "list"), "pycni.cli.info_cmd"),
    "plugins": "pycni.cli.plugins_cmd",
    "daemon": "pycni.cli.daemon_cmd",
    "demo": "pycni.cli.demo_cmd",
    **dict.fromkeys(("inspect", "cleanup"), "pycni.cli.inspect_cmd"),
    "cluster": "pycni.cli.cluster_cmd",
    "agent": "pycni.cli.agent_cmd",
    "dhcp-daemon": "pycni.cli.dhcp_cmd",
    "doctor": "pycni.cli.doctor_cmd",
    "migrate": "pycni.cli.migrate_cmd",
}


def modules_for(argv: list[str], modules: tuple[str, ...]) -> tuple[str, ...]:
    """Just the module of ``argv``'s command when it is known (help and errors then name only
    that command's parser, as they would anyway), else all of them."""
    owner = COMMAND_OWNERS.get(argv[0]) if argv else None
    return (owner,) if owner in modules else modules


def build_parser(modules: tuple[str, ...] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser of ``modules``' commands (all of them unless a caller needs just one:
    a node agent starting on every node need not build the other nine)."""
    parser = argparse.ArgumentParser(
        prog="pycni",
        description="Container Network Interface tools: run network configurations against "
        "network namespaces (like cnitool), inspect configurations and plugins.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None, modules: tuple[str, ...] = COMMAND_MODULES) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(modules_for(argv, modules))
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # the last line of defence: a message, not a traceback
        if os.environ.get("PYCNI_DEBUG"):
            raise
        sys.stderr.write(f"pycni: internal error: {type(err).__name__}: {err}\n")
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
