"""Layout checks for the topology SVG: every label inside the canvas, no two labels overlap,
and the rendered PNG (rsvg-convert, from Debian's librsvg2-bin) has nothing cut at its edge.

Label boxes are computed from the SVG alone, with a monospace metric that errs large
(DejaVu Sans Mono advances 0.602 em; we count 0.65 em, and 1.1 em outside Latin-1), from
the baseline 0.95 em up and 0.3 em down. This is deliberately independent of the renderer's
own arithmetic, so a renderer that under-sizes its boxes fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

SVG = "{http://www.w3.org/2000/svg}"
CHAR_EM = 0.65
WIDE_EM = 1.1


@dataclass(frozen=True)
class Label:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Label) -> bool:
        return (
            self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1
        )


def canvas_size(root: ET.Element) -> tuple[float, float]:
    width, height = float(root.attrib["width"]), float(root.attrib["height"])
    assert root.attrib["viewBox"] == f"0 0 {root.attrib['width']} {root.attrib['height']}"
    return width, height


def labels(root: ET.Element) -> list[Label]:
    out = []
    for el in root.iter(f"{SVG}text"):
        assert el.get("text-anchor", "start") == "start", "labels must start at their x"
        assert len(list(el)) == 0, "no tspans: one label per text element"
        text = el.text or ""
        size = float(el.attrib["font-size"])
        x, y = float(el.attrib["x"]), float(el.attrib["y"])
        width = sum(size * (CHAR_EM if ord(ch) < 0x100 else WIDE_EM) for ch in text)
        out.append(Label(text, x, y - 0.95 * size, x + width, y + 0.3 * size))
    return out


def layout_problems(svg: str) -> list[str]:
    """Every label outside the canvas and every pair of overlapping labels."""
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG}svg"
    width, height = canvas_size(root)
    found = labels(root)
    problems = [
        f"{lb.text!r} leaves the {width:.0f}x{height:.0f} canvas: "
        f"({lb.x0:.1f},{lb.y0:.1f})-({lb.x1:.1f},{lb.y1:.1f})"
        for lb in found
        if lb.x0 < 0 or lb.y0 < 0 or lb.x1 > width or lb.y1 > height
    ]
    ordered = sorted(found, key=lambda lb: lb.y0)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b.y0 >= a.y1:
                break
            if a.overlaps(b):
                problems.append(f"{a.text!r} overlaps {b.text!r}")
    return problems


def render_png(svg: str, directory: Path, name: str = "picture") -> Path:
    """rsvg-convert's rendering of ``svg`` at 100 %."""
    tool = shutil.which("rsvg-convert")
    assert tool, "rsvg-convert is missing: scripts/setup-system.sh installs librsvg2-bin"
    source, png = directory / f"{name}.svg", directory / f"{name}.png"
    source.write_text(svg, encoding="utf-8")
    subprocess.run([tool, "-o", str(png), str(source)], check=True, timeout=120)
    return png


def png_problems(svg: str, png: Path, border: int = 2) -> list[str]:
    """The PNG has the SVG's size and nothing but background in its outer ``border`` pixels."""
    root = ET.fromstring(svg.encode())
    width, height = canvas_size(root)
    with Image.open(png) as img:
        rgb = img.convert("RGB")
        if rgb.size != (int(width), int(height)):
            return [f"PNG is {rgb.size}, SVG says {width}x{height}"]
        background = rgb.getpixel((0, 0))
        w, h = rgb.size
        edge = [(x, y) for x in range(w) for y in (*range(border), *range(h - border, h))]
        edge += [(x, y) for y in range(h) for x in (*range(border), *range(w - border, w))]
        hits = [(x, y) for x, y in edge if rgb.getpixel((x, y)) != background]
    if background != (255, 255, 255):
        return [f"background is {background}, not white"]
    return [f"{len(hits)} drawn pixels at the edge, e.g. {hits[:5]}"] if hits else []
