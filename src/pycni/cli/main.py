"""The ``pycni`` command: a cnitool-compatible front end plus pycni's own commands.

Each command group lives in its own module exposing ``register(subparsers)``; the module's
sub-parsers set ``func(args) -> int``.  To add a group, append its module name to
``COMMAND_MODULES`` (only modules that exist).  Command modules import heavy code inside
their command functions so that starting ``pycni`` stays cheap.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

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


# Commands that act on (or read all of) the node's namespaces, netfilter and CNI state: run
# without root they could only fail half-way or print a partial picture, so they refuse up front.
# In a user namespace (rootless podman) the caller is root there, which is what they need.
NEEDS_ROOT: dict[str, str] = {
    **dict.fromkeys(
        ("add", "check", "del", "gc", "status"),
        "it runs CNI plugins, which change network namespaces, links, routes and netfilter",
    ),
    **dict.fromkeys(
        ("inspect", "doctor"),
        "it reads every network namespace, netfilter table and CNI state file of the node, "
        "and without root it would show only part of them",
    ),
    "cleanup": "it frees addresses and removes leftovers of every network on the node",
    "daemon": "it runs the plugins for every call",
    "demo": "it creates network namespaces, links and netfilter tables",
    "agent": "it programs the node's routes, tunnels and netfilter",
    "dhcp-daemon": "it opens raw sockets in pod namespaces",
}


def refuse_without_root(command: str | None) -> int | None:
    """Exit code 1 with a line saying why, when ``command`` needs root and we are not."""
    why = NEEDS_ROOT.get(command or "")
    if why is None or os.geteuid() == 0:
        return None
    sys.stderr.write(f"pycni {command} needs root: {why}. Run it as root (e.g. with sudo).\n")
    return 1


def modules_for(argv: list[str], modules: tuple[str, ...]) -> tuple[str, ...]:
    """Just the module of ``argv``'s command when it is known (help and errors then name only
    that command's parser, as they would anyway), else all of them."""
    owner = COMMAND_OWNERS.get(argv[0]) if argv else None
    return (owner,) if owner in modules else modules


def build_parser(modules: tuple[str, ...] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser of ``modules``' commands (all of them unless a caller needs just one:
    a node agent starting on every node need not build the other nine)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="pycni",
        description="Container Network Interface tools: run network configurations against "
        "network namespaces (like cnitool), inspect configurations and plugins.",
    )
    from pycni import __version__

    parser.add_argument("--version", action="version", version=f"pycni {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None, modules: tuple[str, ...] = COMMAND_MODULES) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "pycni.cli.cnitool" in modules:
        from pycni.cli import cnitool

        quick = _guarded(
            lambda: cnitool.exact(argv, _prog(), COMMAND_OWNERS, refuse=refuse_without_root)
        )
        if quick is not None:
            return quick
    parser = build_parser(modules_for(argv, modules))
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    refused = refuse_without_root(getattr(args, "command", None))
    if refused is not None:
        return refused
    code = _guarded(lambda: func(args))
    assert code is not None
    return code


def _guarded(call: Callable[[], int | None]) -> int | None:
    """Run a command: ^C is exit 130, any other exception a message (not a traceback)."""
    try:
        return call()
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # the last line of defence: a message, not a traceback
        if os.environ.get("PYCNI_DEBUG"):
            raise
        sys.stderr.write(f"pycni: internal error: {type(err).__name__}: {err}\n")
        return 1


def _prog() -> str:
    """The program name cnitool's usage prints: the basename it was started as."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "pycni"
    return "pycni" if name.endswith(".py") else name


if __name__ == "__main__":
    sys.exit(main())
