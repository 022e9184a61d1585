"""The topology picture of a real node, the demo's three pods: every label inside the
canvas, none overlapping, nothing cut in rsvg-convert's PNG, and the picture names what the
kernel holds (uplink, route, bridge, pods with their addresses, the port mapping)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests import harness, svg_check

PYCNI = str(Path(sys.executable).parent / "pycni")
SVG = "{http://www.w3.org/2000/svg}"

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def test_demo_node_picture_is_complete_and_fits(tmp_path: Path) -> None:
    prefix = f"{harness.RUN_PREFIX}svg{os.getpid() % 1000}-"
    picture = tmp_path / "demo-node.svg"
    proc = subprocess.run(
        [
            PYCNI,
            "demo",
            "--mode",
            "inprocess",
            "--prefix",
            prefix,
            "--state-dir",
            str(tmp_path / "demo"),
            "--svg",
            str(picture),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    svg = picture.read_text(encoding="utf-8")
    texts = [el.text or "" for el in ET.fromstring(svg.encode()).iter(f"{SVG}text")]
    assert texts[0] == f"CNI on node {prefix}node"
    assert "eth0 (veth, up)" in texts and "192.168.250.1/24" in texts
    assert f"═ {prefix}client:eth0" in texts
    assert "10.88.0.0/24 dev cni-demo0" in texts and "bridge cni-demo0" in texts
    for i in (1, 2, 3):
        assert f"{prefix}pod{i}" in texts
    assert sum(t.startswith("eth0  10.88.0.") for t in texts) == 3
    assert "node tcp/8080" in texts
    assert any(t.startswith("pycni daemon") for t in texts) and "calls run in-process" in texts
    assert "Masquerade (1)" in texts
    assert any(t.startswith("pycni-demo: 10.88.0.0/24") for t in texts)
    assert "Leaks: none" in texts
    assert svg_check.layout_problems(svg) == []
    png = svg_check.render_png(svg, tmp_path, "demo-node")
    assert svg_check.png_problems(svg, png) == []
