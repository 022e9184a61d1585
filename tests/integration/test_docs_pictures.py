"""docs/demo-node.png is what the README's first tour block draws today (tests/docs_pictures.py):
the block runs again, and its picture must say what the committed one says, word for word
(random veth names and pids aside). When it does not, redraw with
``.venv/bin/python -m tests.docs_pictures``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from tests import docs_pictures, svg_check

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def test_the_demo_picture_is_what_readme_block_one_draws(tmp_path: Path) -> None:
    fresh = docs_pictures.draw(tmp_path / "block-one.svg")
    shown = docs_pictures.DOCS_SVG.read_text(encoding="utf-8")
    assert docs_pictures.normalised(fresh) == docs_pictures.normalised(shown), (
        "docs/demo-node.svg/png are stale: run `.venv/bin/python -m tests.docs_pictures`"
    )
    said = docs_pictures.texts(fresh)
    assert "pycni daemon: answering" in said
    assert "20 entry points forward to it" in said
    assert "calls run in-process" not in said
    assert any(t.startswith("by pycni demo") for t in said)
    assert not [t for t in said if "/work/" in t or "/tmp/" in t], "a developer's path"
    assert svg_check.layout_problems(fresh) == []


@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="rsvg-convert not installed")
def test_the_png_is_the_committed_svg(tmp_path: Path) -> None:
    svg = docs_pictures.DOCS_SVG.read_text(encoding="utf-8")
    png = svg_check.render_png(svg, tmp_path, "demo-node")
    with Image.open(png) as drawn, Image.open(docs_pictures.DOCS_PNG) as committed:
        assert drawn.size == committed.size
        assert drawn.convert("RGB").tobytes() == committed.convert("RGB").tobytes()
