"""`pycni plugins`: install the per-exec entry points, list the plugin types.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pycni.daemon import protocol

FORMS = ("auto", "c", "python", "inprocess")  # pycni.entrypoints.install.FORMS, kept import-free
IDLE_EXIT_DEFAULT = 300.0  # pycni.daemon.autostart.IDLE_EXIT_DEFAULT


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "plugins", help="install plugin entry points into a CNI_PATH directory, or list them"
    )
    sub = parser.add_subparsers(dest="plugins_command", required=True)
    inst = sub.add_parser(
        "install",
        help="write one executable per plugin type into DIR",
        description="Each entry point forwards its call to the pycni daemon and runs the "
        "plugin in-process when no daemon answers. By default that call also starts a daemon "
        "in the background (it exits after --idle-exit seconds without a call); "
        "--no-autostart leaves starting it to you (systemd: contrib/pycni.socket).",
    )
    inst.add_argument("directory", metavar="DIR")
    inst.add_argument("--socket", default=protocol.DEFAULT_SOCKET, help="daemon socket path")
    inst.add_argument(
        "--form",
        choices=FORMS,
        default="auto",
        help="c: native forwarder; python: stdlib forwarder script; inprocess: never use the "
        "daemon; auto: c when a C compiler works (default)",
    )
    inst.add_argument(
        "--no-autostart",
        dest="autostart",
        action="store_false",
        help="never start a daemon from an entry point (run in-process until one is started)",
    )
    inst.add_argument(
        "--idle-exit",
        type=float,
        default=IDLE_EXIT_DEFAULT,
        metavar="SECONDS",
        help=f"an autostarted daemon exits after this long without a call "
        f"(default {IDLE_EXIT_DEFAULT:g}; 0: never)",
    )
    inst.add_argument("--only", action="append", metavar="TYPE", help="install only these types")
    inst.set_defaults(func=run_install)
    lst = sub.add_parser("list", help="list the plugin types pycni provides")
    lst.set_defaults(func=run_list)


def run_install(args: argparse.Namespace) -> int:
    from pycni.entrypoints import build
    from pycni.entrypoints.install import install
    from pycni.skel import registry

    unknown = sorted(set(args.only or ()) - set(registry.PLUGIN_TYPES))
    if unknown:
        sys.stderr.write(f"pycni plugins install: unknown plugin types: {', '.join(unknown)}\n")
        return 2
    if args.idle_exit < 0:
        sys.stderr.write("pycni plugins install: --idle-exit must be 0 (never) or positive\n")
        return 2
    try:
        report = install(
            args.directory,
            socket_path=args.socket,
            form=args.form,
            names=args.only,
            autostart=args.autostart,
            idle_exit=args.idle_exit,
        )
    except (OSError, build.BuildError, RuntimeError) as exc:
        sys.stderr.write(f"pycni plugins install: {exc}\n")
        return 1
    for note in report.notes:
        sys.stderr.write(f"note: {note}\n")
    start = f"autostart, idle exit {report.idle_exit:g}s" if report.autostart else "no autostart"
    sys.stdout.write(
        f"installed {len(report.paths)} entry points ({report.form} form, {start}, socket "
        f"{report.socket_path}) in {report.directory}: {' '.join(report.names)}\n"
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    from pycni.skel import registry

    available = set(registry.names())
    for name in sorted(registry.PLUGIN_TYPES):
        sys.stdout.write(f"{name}{'' if name in available else ' (not available)'}\n")
    return 0
