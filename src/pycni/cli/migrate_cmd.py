"""`pycni migrate --to-reference`: hand this node's pods back to the Go reference plugins.

A command's work imports what it needs in its handler, on purpose: every command module is
imported to build the parser, and registering must stay cheap (tests/unit/test_cli.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_CACHE_DIR = "/var/lib/cni"  # repeated here (not imported): registering stays import-free


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "migrate",
        help="hand this node's live pods back to the reference plugins (--to-reference)",
        description="Re-writes the state pycni keeps in layouts of its own (portmap's nftables "
        "maps, ipMasq's nftables sets) in the layouts the Go reference plugins (v1.9.1) pick "
        "for the same configs, for every attachment in the libcni cache, so the reference's "
        "CHECK, DEL and GC then serve them. Runs in the current network namespace (use `ip "
        "netns exec NODE pycni migrate …` for another one). Prints one line per change; exit "
        "code 1 when an attachment could not be handed back (its state is left as it was). "
        "See docs/migration.md.",
    )
    parser.add_argument(
        "--to-reference",
        action="store_true",
        required=True,
        help="convert to the reference's layouts (the only direction that needs a command)",
    )
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="libcni's cache dir")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would change, change nothing"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pycni.inspect import migrate

    steps = migrate.to_reference(args.cache_dir, dry_run=args.dry_run)
    for step in steps:
        print(step.line(), file=sys.stderr if step.error else sys.stdout)
    if not steps:
        print("nothing to hand back: every cached attachment is in the reference's layouts")
    return 1 if any(step.error for step in steps) else 0
