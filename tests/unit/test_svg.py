"""The topology SVG: well-formed, escapes names, shows what the text view shows (uplink,
routes, bridges with their pods, port mappings as arrows, the daemon, leaks in red), and
lays out 1 to 100 pods with every label inside the canvas and no two labels overlapping —
checked on the SVG and on rsvg-convert's PNG."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pycni.inspect import render_svg
from pycni.inspect.model import Bridge, DaemonStatus, HostInterface, NodeState, PodLink, Veth
from tests import svg_check
from tests.unit.svg_models import demo_like

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG}svg"
    return [el.text or "" for el in root.iter(f"{SVG}text")]


def _rects(svg: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg.encode())
    return [el for el in root.iter(f"{SVG}rect") if el.get("class") == cls]


def _state() -> NodeState:
    state = NodeState(netns="node<&>", conf_dir="c", cache_dir="k", data_dir="d")
    state.interfaces = [HostInterface("eth0", 2, "veth", True, ["192.0.2.1/24"])]
    state.bridges = [Bridge("cni0", 3, up=True, addresses=["10.1.0.1/24"], ports=["va", "vb"])]
    state.veths = [
        Veth(
            "va",
            4,
            master="cni0",
            peer=PodLink("pod-a", "/run/netns/pod-a", "eth0", 2, "", ["10.1.0.2/24"]),
        ),
        Veth("vb", 5, master="cni0", peer=PodLink('pod"b"&<x>', "/p", "net1", 3, "", [])),
        Veth("loose", 6, peer_index=9),
    ]
    return state


def test_svg_is_xml_and_names_everything() -> None:
    texts = " ".join(_texts(render_svg.render(_state())))
    for name in (
        "node<&>",
        "eth0",
        "192.0.2.1/24",
        "cni0",
        "10.1.0.1/24",
        "va",
        "vb",
        "pod-a",
        "10.1.0.2/24",
        'pod"b"&<x>',
        "net1",
        "loose",
        "peer not found",
    ):
        assert name in texts, name


def test_svg_of_an_empty_node_is_valid() -> None:
    svg = render_svg.render(NodeState("empty-node", "c", "k", "d"))
    texts = _texts(svg)
    assert texts[0] == "CNI on node empty-node"
    assert "Leaks: none" in texts and "Routes (0)" in texts
    assert svg_check.layout_problems(svg) == []


def test_each_pod_gets_its_own_column() -> None:
    svg = render_svg.render(_state())
    pods = _rects(svg, "pod")
    assert len(pods) == 2  # "loose" is on no bridge and in no cached result: a node interface
    assert len({el.get("x") for el in pods}) == 2


def test_the_picture_shows_what_the_text_view_shows() -> None:
    state, leaks = demo_like(3)
    svg = render_svg.render(state, leaks)
    texts = _texts(svg)
    joined = "\n".join(texts)
    # the node with its uplink (and the far end of the uplink veth) and routes
    assert "eth0 (veth, up)" in texts and "192.168.250.1/24" in texts
    assert "═ pycni-demo-client:eth0" in texts
    assert "default via 192.168.250.254 dev eth0" in texts
    assert "10.88.0.0/16 dev cni-demo0" in texts
    # each bridge with its ports and pods (name, addresses)
    assert "bridge cni-demo0" in texts
    for i in range(3):
        assert f"veth{i:04x}a8c2" in texts and f"pycni-demo-pod{i + 1}" in texts
        assert f"eth0  10.88.0.{i + 2}/16" in texts
    # the daemon and its mode
    assert "pycni daemon: answering" in texts and "serves every call (ok)" in texts
    assert "systemd unit pycni.service" in texts
    # port mappings: a host-port box, an arrow, the pod's address and port
    assert "node tcp/8080" in texts and "10.88.0.2:80" in texts
    root = ET.fromstring(svg.encode())
    arrows = [el for el in root.iter(f"{SVG}line") if el.get("marker-end")]
    assert len(arrows) == len(state.port_mappings) == 2
    assert all(float(a.attrib["x2"]) > float(a.attrib["x1"]) for a in arrows)
    # leaks marked in red, and listed
    assert {el.get("class") for el in arrows} == {"arrow", "arrow-leak"}
    assert len(_rects(svg, "leak")) == 4  # leaked veth + its pod, leaked mapping: host + target
    assert "Leaks (3): `pycni cleanup` removes them" in texts
    assert "veth: vethdead01" in texts and "LEAKED" in texts
    assert "reservation: /run/pycni-demo/networks/pycni-demo/10.88.0.250" in joined
    assert svg_check.layout_problems(svg) == []


def test_a_daemon_that_does_not_answer_is_shown_as_in_process() -> None:
    state, _ = demo_like(1, leaky=False)
    state.daemon = DaemonStatus("/run/pycni/pycni.sock", error="no pycni daemon")
    texts = _texts(render_svg.render(state, []))
    assert "pycni daemon: not running" in texts and "calls run in-process" in texts
    assert "Leaks: none" in texts


@pytest.mark.parametrize("pods", [1, 3, 17, 100])
def test_labels_stay_inside_and_apart(pods: int) -> None:
    state, leaks = demo_like(pods)
    svg = render_svg.render(state, leaks)
    assert svg_check.layout_problems(svg) == []
    texts = _texts(svg)
    assert sum(t.startswith("pycni-demo-pod") for t in texts) >= pods
    root = ET.fromstring(svg.encode())
    width, _height = svg_check.canvas_size(root)
    assert width <= render_svg.MAX_ROW + 200, "pods wrap into rows instead of a wide strip"


def test_long_names_are_shortened_and_still_fit() -> None:
    state, leaks = demo_like(4)
    assert state.veths[1].peer is not None
    state.veths[1].peer.namespace = "netns-" + "0123456789abcdef" * 8
    state.netns = "n" * 300
    svg = render_svg.render(state, leaks)
    assert svg_check.layout_problems(svg) == []
    assert any(t.startswith("netns-0123") and "…" in t for t in _texts(svg))


def test_control_characters_and_undecodable_names_stay_valid_xml(tmp_path: Path) -> None:
    state, leaks = demo_like(2)
    assert state.veths[1].peer is not None
    state.veths[1].peer.namespace = "evil\x1b[31m\x00\udcff"  # as os.listdir may return it
    svg = render_svg.render(state, leaks)
    (tmp_path / "x.svg").write_text(svg, encoding="utf-8")  # encodable
    assert "evil\ufffd[31m\ufffd\ufffd" in _texts(svg)
    assert svg_check.layout_problems(svg) == []


def test_the_checker_catches_overlap_and_overflow() -> None:
    bad = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50" viewBox="0 0 100 50">'
        '<text x="5" y="20" font-size="12">overlapping</text>'
        '<text x="30" y="22" font-size="12">labels</text>'
        '<text x="60" y="45" font-size="12">cut at the edge</text></svg>'
    )
    problems = svg_check.layout_problems(bad)
    assert any("overlaps" in p for p in problems)
    assert any("leaves the 100x50 canvas" in p for p in problems)


def test_100_pods_render_to_a_png_with_nothing_cut(tmp_path: Path) -> None:
    state, leaks = demo_like(100)
    svg = render_svg.render(state, leaks)
    png = svg_check.render_png(svg, tmp_path, "100-pods")
    assert svg_check.png_problems(svg, png) == []


def test_the_png_check_sees_text_cut_at_the_edge(tmp_path: Path) -> None:
    cut = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40" viewBox="0 0 120 40">'
        '<rect width="120" height="40" fill="#fff"/>'
        '<text x="60" y="25" font-size="16" font-family="monospace">clipped label</text></svg>'
    )
    png = svg_check.render_png(cut, tmp_path, "cut")
    assert svg_check.png_problems(cut, png) != []
