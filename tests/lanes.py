"""Which lane runs a test file (docs/testing.md), decided by its path alone.

tests/plugins/<plugin>/ holds a plugin's tests of every lane, told apart by the file name's
suffix, as does any newer tree (tests/netfilter/); the four older trees are one lane each.
tests/conftest.py's ``--lane`` collects only the files of the lanes named, and the full-kernel
lane (tests/fullkernel/lane.py) boots its guest for the files this calls ``fullkernel``,
wherever they are.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
PLUGINS = TESTS / "plugins"
LANES = ("unit", "kernel", "interop", "fullkernel")
# tests/plugins and any newer tree: a file's lane is its name's suffix; none: the unit lane.
SUFFIXES = {"_kernel.py": "kernel", "_interop.py": "interop", "_fullkernel.py": "fullkernel"}
# The trees from before tests/plugins: one lane each.
TREES = {"unit": "unit", "integration": "kernel", "interop": "interop", "fullkernel": "fullkernel"}


def lane_of(path: Path | str) -> str | None:
    """The lane of a test file under tests/ ("unit", "kernel", "interop" or "fullkernel"),
    or None for a path that is no test file (a helper module, a file outside tests/)."""
    path = Path(path).resolve()
    try:
        parts = path.relative_to(TESTS).parts
    except ValueError:
        return None
    if not path.name.startswith("test_") or path.suffix != ".py":
        return None
    if len(parts) > 1 and parts[0] in TREES:
        return TREES[parts[0]]
    return next((lane for end, lane in SUFFIXES.items() if path.name.endswith(end)), "unit")


def outside(path: Path | str, wanted: list[str]) -> bool:
    """Whether ``--lane`` (the lanes ``wanted``) leaves this path out: a test file of another
    lane, or a whole tree of another lane (so its conftest.py is not even imported)."""
    if not wanted:
        return False
    path = Path(path).resolve()
    if path.parent == TESTS and path.name in TREES:
        return TREES[path.name] not in wanted
    lane = lane_of(path)
    return lane is not None and lane not in wanted
