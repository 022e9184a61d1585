"""A diagram of the node's CNI topology as hand-written SVG (no dependencies).

Layout, top to bottom: the node's own interfaces, each bridge spanning its ports, the host
end of every veth, and under each one the pod (namespace) box with the interface and
address of the other end. Veths on no bridge get their own column group at the right.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from pycni.inspect.model import NodeState, Veth

COL_W = 200
BOX_W = 180
MARGIN = 20
Y_HOST = 50
Y_BRIDGE = 140
Y_VETH = 240
Y_POD = 330
LINE_H = 16

_STYLE = (
    "text{font-family:monospace;font-size:12px;fill:#222}"
    ".title{font-size:14px;font-weight:bold}"
    ".host{fill:#e8f0fe;stroke:#3b6fd8}"
    ".bridge{fill:#fff4d6;stroke:#c08a00}"
    ".veth{fill:#eef8ee;stroke:#3a913a}"
    ".pod{fill:#f6ecfb;stroke:#8a3ab9}"
    ".node{fill:none;stroke:#999;stroke-dasharray:6 4}"
    ".wire{stroke:#555;stroke-width:2}"
    ".pair{stroke:#3a913a;stroke-width:2;stroke-dasharray:4 3}"
)


class _Canvas:
    def __init__(self) -> None:
        self.items: list[str] = []

    def box(self, x: int, y: int, w: int, h: int, cls: str, lines: list[str]) -> None:
        self.items.append(f'<rect class="{cls}" x="{x}" y="{y}" width="{w}" height="{h}" rx="6"/>')
        for i, line in enumerate(lines):
            attr = ' class="title"' if i == 0 else ""
            self.items.append(
                f'<text{attr} x="{x + 8}" y="{y + 18 + i * LINE_H}">{escape(line)}</text>'
            )

    def line(self, x1: int, y1: int, x2: int, y2: int, cls: str) -> None:
        self.items.append(f'<line class="{cls}" x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}"/>')

    def text(self, x: int, y: int, value: str, cls: str = "") -> None:
        attr = f" class={quoteattr(cls)}" if cls else ""
        self.items.append(f'<text{attr} x="{x}" y="{y}">{escape(value)}</text>')


def _groups(state: NodeState) -> list[tuple[str | None, list[Veth]]]:
    """(bridge name or None, its veths) in display order."""
    groups: list[tuple[str | None, list[Veth]]] = []
    for bridge in state.bridges:
        groups.append((bridge.name, [v for v in state.veths if v.master == bridge.name]))
    loose = [v for v in state.veths if v.master not in {b.name for b in state.bridges}]
    if loose:
        groups.append((None, loose))
    return groups


def render(state: NodeState) -> str:
    canvas = _Canvas()
    groups = _groups(state)
    host_ifs = [i for i in state.interfaces if i.name != "lo"]
    columns = max(sum(max(len(vs), 1) for _b, vs in groups), len(host_ifs), 1)
    width = MARGIN * 2 + columns * COL_W
    max_lines = max([len(v.peer.addresses) for _b, vs in groups for v in vs if v.peer] + [1])
    pod_h = 30 + (1 + max_lines) * LINE_H
    height = Y_POD + pod_h + MARGIN

    canvas.text(MARGIN, 24, f"CNI topology of namespace {state.netns}", "title")
    canvas.items.append(
        f'<rect class="node" x="{MARGIN // 2}" y="{Y_HOST - 12}" '
        f'width="{width - MARGIN}" height="{Y_VETH + 60 - Y_HOST}" rx="8"/>'
    )
    for i, iface in enumerate(host_ifs):
        x = MARGIN + i * COL_W
        lines = [f"{iface.name} ({iface.kind or 'link'})", *iface.addresses[:2]]
        canvas.box(x, Y_HOST, BOX_W, 20 + LINE_H * len(lines), "host", lines)

    col = 0
    bridge_boxes = {b.name: b for b in state.bridges}
    for bridge_name, veths in groups:
        span = max(len(veths), 1)
        x0 = MARGIN + col * COL_W
        if bridge_name is not None:
            bridge = bridge_boxes[bridge_name]
            lines = [f"bridge {bridge.name}", ", ".join(bridge.addresses[:2]) or "(no address)"]
            canvas.box(x0, Y_BRIDGE, span * COL_W - (COL_W - BOX_W), 52, "bridge", lines)
        for j, veth in enumerate(veths):
            x = MARGIN + (col + j) * COL_W
            mid = x + BOX_W // 2
            if bridge_name is not None:
                canvas.line(mid, Y_BRIDGE + 52, mid, Y_VETH, "wire")
            canvas.box(x, Y_VETH, BOX_W, 40, "veth", [veth.name, "veth (host end)"])
            canvas.line(mid, Y_VETH + 40, mid, Y_POD, "pair")
            if veth.peer is not None:
                lines = [
                    veth.peer.namespace,
                    f"{veth.peer.name} (veth)",
                    *veth.peer.addresses,
                ]
            else:
                lines = ["(peer not found)", f"peer ifindex {veth.peer_index}"]
            canvas.box(x, Y_POD, BOX_W, pod_h, "pod", lines)
        col += span

    body = "\n".join(canvas.items)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">\n'
        f"<style>{_STYLE}</style>\n"
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>\n'
        f"{body}\n</svg>\n"
    )
