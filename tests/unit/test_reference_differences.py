"""The differences the differential tests may normalise (tests/reference_differences.py) are
exactly the ones docs/differences-from-reference.md lists, word for word, each in the table of
the references it applies to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import reference_differences as differences

DOC = Path(__file__).resolve().parents[2] / "docs" / "differences-from-reference.md"


def _tables() -> list[list[tuple[str, ...]]]:
    """Each table of the page as rows of cells (``\\|`` unescaped, the key's backticks off)."""
    tables: list[list[tuple[str, ...]]] = []
    current: list[tuple[str, ...]] | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("| key |"):
            current = []
            tables.append(current)
        elif current is not None and line.startswith("| `"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            cells[0] = cells[0].strip("`")
            current.append(tuple(cells))
        elif not line.startswith("|---"):
            current = None
    return tables


def _rows(table: dict[str, differences.Difference]) -> list[tuple[str, ...]]:
    return [(d.key, d.plugins, d.what, d.why, d.restore) for d in table.values()]


def test_the_docs_tables_are_the_python_tables() -> None:
    deliberate, v1_1_1 = _tables()
    assert deliberate == _rows(differences.DELIBERATE)
    assert v1_1_1 == _rows(differences.V1_1_1_ONLY)


def test_a_v1_1_1_row_never_applies_to_v1_9_1() -> None:
    for key in differences.V1_1_1_ONLY:
        assert differences.applies(key, "v1.1.1")
        assert not differences.applies(key, "v1.9.1")
    for key in differences.DELIBERATE:
        assert differences.applies(key, "v1.9.1") and differences.applies(key, "v1.1.1")
    assert not set(differences.DELIBERATE) & set(differences.V1_1_1_ONLY)


def test_an_unknown_key_is_an_error() -> None:
    with pytest.raises(KeyError):
        differences.applies("txqlen", "v1.9.1")
    with pytest.raises(KeyError):
        differences.deliberate("txqlen-zero")  # a v1.1.1 row needs its reference named
    assert differences.deliberate("dns-empty")
