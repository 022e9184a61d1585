"""The topology SVG is well-formed, escapes names, and shows every pod and interface."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pycni.inspect import render_svg
from pycni.inspect.model import Bridge, HostInterface, NodeState, PodLink, Veth

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG}svg"
    return [el.text or "" for el in root.iter(f"{SVG}text")]


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
    texts = _texts(render_svg.render(NodeState("n", "c", "k", "d")))
    assert any("n" in t for t in texts)


def test_each_pod_gets_its_own_column() -> None:
    svg = render_svg.render(_state())
    root = ET.fromstring(svg.encode())
    pods = [el for el in root.iter(f"{SVG}rect") if el.get("class") == "pod"]
    assert len(pods) == 3
    assert len({el.get("x") for el in pods}) == 3
