"""The docs hold together: every relative link in README.md and docs/ reaches a file (and its
anchor, a heading as GitHub names it), docs/architecture.md stays one screen, and the paths and
modules docs/benchmarks.md cites exist, so a move or a rename that strands a page fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
ARCHITECTURE_LINES = 60  # one screen
ARCHITECTURE_COLUMNS = 100

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, markup and punctuation dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        name, n = base, 0
        while name in found:  # GitHub numbers repeated headings
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """What is wrong with each relative link of a page, named from the root."""
    out = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if target.startswith(_EXTERNAL):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}: ({target})"
        if not dest.exists():
            out.append(f"{where}: no file {path}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# Here\n\n## The seam (`req.host`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#the-seam-reqhost) [ok](#a) [web](https://x.org/y)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
        "[gone](missing.md) [bad anchor](there.md#nope)\n\n# A\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md: (missing.md): no file missing.md",
        "page.md: (there.md#nope): no heading #nope in there.md",
    ]


def test_architecture_fits_on_one_screen() -> None:
    lines = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= ARCHITECTURE_LINES
    wide = [n for n, line in enumerate(lines, 1) if len(line) > ARCHITECTURE_COLUMNS]
    assert wide == [], f"lines wider than {ARCHITECTURE_COLUMNS} columns"


def test_the_architecture_diagram_is_the_layers_contract() -> None:
    """Each row of the diagram names the packages of one layer of pyproject's contract."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == "pycni layers"
    ]
    layers = [sorted(p.strip().removeprefix("pycni.") for p in row.split("|"))
              for row in contract["layers"]]  # fmt: skip
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    diagram = text.split("```", 2)[1].splitlines()[1:]
    rows = []
    for line in (row.strip() for row in diagram):
        if line:  # the names, then the widest gap, then what they are
            gap = max(re.finditer(r" +", line), key=lambda m: len(m.group()))
            rows.append(sorted(name.rstrip("/") for name in line[: gap.start()].split()))
    assert rows == layers


_CITED_PATH = re.compile(r"(?<![\w/.])((?:src|bench|tests|contrib|scripts|deploy)/[\w./-]*\w)")
_CITED_MODULE = re.compile(r"`(pycni(?:\.\w+)+)")
_CITED_PACKAGE = re.compile(r"(?<![\w/.-])([a-z_]+)/(?!\w)")  # "fast/": a package of pycni


def test_what_benchmarks_md_cites_exists() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    missing = [p for p in sorted(set(_CITED_PATH.findall(text))) if not (REPO / p).exists()]
    for module in sorted(set(_CITED_MODULE.findall(text))):
        parts = module.split(".")
        # the module itself, or a name defined in one (pycni.daemon.phases.install)
        if not any(
            (REPO / "src" / Path(*parts[:n])).with_suffix(".py").exists()
            or (REPO / "src" / Path(*parts[:n]) / "__init__.py").exists()
            for n in (len(parts), len(parts) - 1)
        ):
            missing.append(module)
    for package in sorted(set(_CITED_PACKAGE.findall(text))):
        if not (REPO / "src" / "pycni" / package).is_dir() and not (REPO / package).is_dir():
            missing.append(f"{package}/")
    assert missing == []
