"""The daemon's layer rule: daemon/ may import skel/, runtime/, spec/ and net/; none of those
(nor the plugins) may import daemon/, so the installer, the daemon and the plugins never form a
cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pycni

SRC = Path(pycni.__file__).parent
LOWER = ("spec", "runtime", "skel", "plugins", "net")


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_lower_layers_do_not_import_the_daemon() -> None:
    offenders = {
        str(path.relative_to(SRC)): sorted(m for m in imported_modules(path) if "pycni.daemon" in m)
        for layer in LOWER
        for path in (SRC / layer).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_daemon_does_not_import_the_cli() -> None:
    for path in (SRC / "fast").rglob("*.py"):
        assert not [m for m in imported_modules(path) if m.startswith("pycni.cli")], path
