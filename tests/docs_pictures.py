"""The docs' pictures come from real runs of the README's own commands.

``docs/demo-node.png`` is what the README tour's first block draws: ``pycni demo --keep``, then
the block's ``pycni inspect … --svg /tmp/demo-node.svg`` from inside the demo node, then
``pycni demo --down``. ``docs/demo-node.svg`` is kept beside it, and the suite
(tests/integration/test_docs_pictures.py) runs the block again and compares what the picture
says, word for word, with what the committed one says, after :func:`normalised` blanks what
differs by chance (random veth names, pids). To redraw both after a change:

    .venv/bin/python -m tests.docs_pictures        # as root, from the top of the checkout
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests import readme_runner

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS_SVG = REPO / "docs" / "demo-node.svg"
DOCS_PNG = REPO / "docs" / "demo-node.png"
TOUR_SVG = "/tmp/demo-node.svg"
_SVG_NS = "{http://www.w3.org/2000/svg}"
_VOLATILE = [
    (re.compile(r"\bveth[0-9a-f]{8}\b"), "vethXXXXXXXX"),
    (re.compile(r"\bpid \d+\b"), "pid N"),
    (re.compile(r"\(pid \d+\)"), "(pid N)"),
]


def block_one() -> list[str]:
    """The README's first tour block (the one that keeps the demo and draws it)."""
    for block in readme_runner.extract(README.read_text(encoding="utf-8")):
        if block.mode == "run" and any("demo --keep" in line for line in block.lines):
            return block.lines
    raise AssertionError("README has no block with `pycni demo --keep`")


def draw(dest: Path) -> str:
    """Run block one as written except its final ``rm``, and move the picture to ``dest``."""
    lines = [line for line in block_one() if line.strip() != f"rm {TOUR_SVG}"]
    script = "set -Ee -o pipefail\n" + "\n".join(lines) + "\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    if proc.returncode != 0:
        subprocess.run([str(REPO / ".venv/bin/pycni"), "demo", "--down"], check=False)
        raise AssertionError(f"README block one failed:\n{proc.stdout}\n{proc.stderr}")
    shutil.move(TOUR_SVG, dest)
    return dest.read_text(encoding="utf-8")


def texts(svg: str) -> list[str]:
    """Every text of the picture, in document order."""
    root = ET.fromstring(svg.encode())
    return [el.text or "" for el in root.iter(f"{_SVG_NS}text")]


def normalised(svg: str) -> list[str]:
    """The picture's texts with what differs from run to run blanked."""
    out = []
    for text in texts(svg):
        for pattern, replacement in _VOLATILE:
            text = pattern.sub(replacement, text)
        out.append(text)
    return out


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        svg = draw(Path(scratch) / "demo-node.svg")
        DOCS_SVG.write_text(svg, encoding="utf-8")
        subprocess.run(["rsvg-convert", "-o", str(DOCS_PNG), str(DOCS_SVG)], check=True)
    sys.stdout.write(f"wrote {DOCS_SVG.relative_to(REPO)} and {DOCS_PNG.relative_to(REPO)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
