"""A diagram of the node's CNI topology as hand-written SVG (no dependencies).

It shows what the text report shows, top to bottom inside the node's frame:

- a top row: the node's own interfaces (uplinks, with the far end of an uplink veth), its
  routes, the configured networks and the daemon with its mode;
- each bridge as a bar with its ports below it: the host end of every veth, and under it
  the pod (namespace, interface, addresses); pods wrap into rows, so 1 or 100 pods stay
  readable at 100 % (veths on no bridge, e.g. ptp pods, get a group of their own);
- port mappings as arrows from the node's host port to the pod's address and port;
- the leaks: every leaked veth, pod or mapping is drawn in red, and all leaks are listed.

Every box is sized from its text with a monospace metric that errs large (``CHAR_EM``), and
the canvas from the boxes, so nothing is clipped. Text is never centred: each label starts
at its ``x`` (what tests rely on to compute label boxes from the SVG).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from pycni.inspect.model import NodeState, PortMapping, Veth
from pycni.record import field, record

if TYPE_CHECKING:  # leaks imports the kernel readers; the renderer stays pure
    from pycni.inspect.leaks import Leak

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
CHAR_EM = 0.65  # advance of one character in ems: DejaVu Sans Mono is 0.602, so this errs large
WIDE_EM = 1.1  # characters outside Latin-1 (arrows, ellipsis) may come from a wider font
FS = 12  # body text
FS_HEAD = 13  # the first line of a box
FS_TITLE = 17
LINE = 17  # baseline to baseline
PAD = 9  # inside a box
GAP = 14  # between boxes
MARGIN = 16  # canvas edge to content
NODE_PAD = 16  # node frame to its content
MAX_ROW = 1500  # wrap rows of boxes wider than this
MAX_CHARS = 64  # longer labels are shortened in the middle
MAX_LIST = 40  # longer lists (routes, leaks) show the first ones and a count

_STYLE = (
    "text{fill:#1d1d1f}"
    ".t-title{font-weight:bold}"
    ".t-head{font-weight:bold}"
    ".t-dim{fill:#555}"
    ".t-leak{fill:#b00020;font-weight:bold}"
    ".t-ok{fill:#1b7f3b;font-weight:bold}"
    ".node{fill:#fbfbfc;stroke:#8a8f98;stroke-width:1.5;stroke-dasharray:7 4}"
    ".uplink{fill:#e8f0fe;stroke:#3b6fd8}"
    ".routes{fill:#f2f3f5;stroke:#8a8f98}"
    ".networks{fill:#f2f3f5;stroke:#8a8f98}"
    ".daemon{fill:#e3f6f3;stroke:#16877a}"
    ".daemon-off{fill:#fff6e0;stroke:#b7791f}"
    ".bridge{fill:#fff1c9;stroke:#c08a00;stroke-width:1.5}"
    ".veth{fill:#eaf7ea;stroke:#3a913a}"
    ".pod{fill:#f4eafb;stroke:#8a3ab9}"
    ".hostport{fill:#e8f0fe;stroke:#3b6fd8}"
    ".leak{fill:#ffe3e6;stroke:#d0021b;stroke-width:2.5}"
    ".leaks{fill:#fff0f1;stroke:#d0021b;stroke-width:1.5}"
    ".noleaks{fill:#eef8f0;stroke:#1b7f3b}"
    ".wire{stroke:#9a7300;stroke-width:2;fill:none}"
    ".pair{stroke:#3a913a;stroke-width:2;stroke-dasharray:5 3}"
    ".arrow{stroke:#3b6fd8;stroke-width:2;fill:none}"
    ".arrow-leak{stroke:#d0021b;stroke-width:2;fill:none}"
)


def _char_width(ch: str, size: float) -> float:
    return size * (CHAR_EM if ord(ch) < 0x100 else WIDE_EM)


def _text_width(value: str, size: float) -> float:
    """Width the label needs, erring large."""
    return sum(_char_width(ch, size) for ch in value)


def printable(value: str) -> str:
    """Control characters and undecodable bytes (surrogates from file names) as U+FFFD: XML
    forbids the first, UTF-8 cannot carry the second, and names come from anyone."""
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in value)


def _shorten(value: str, limit: int = MAX_CHARS) -> str:
    """``value`` cut in the middle to ``limit`` characters (the ends say the most)."""
    if len(value) <= limit:
        return value
    keep = limit - 1
    return value[: keep - keep // 2] + "…" + value[-(keep // 2) :]


@record
class Line:
    text: str
    style: str = ""  # "head", "dim", "leak", "ok"

    def __post_init__(self) -> None:
        self.text = printable(self.text)

    @property
    def size(self) -> int:
        return FS_HEAD if self.style == "head" else FS


@record
class Box:
    """A rounded box of text lines; ``width`` and ``height`` follow from the lines."""

    cls: str
    lines: list[Line]
    min_width: float = 0.0
    x: float = 0.0
    y: float = 0.0

    @property
    def width(self) -> float:
        need = max([_text_width(ln.text, ln.size) for ln in self.lines] + [0.0])
        return max(self.min_width, need + 2 * PAD)

    @property
    def height(self) -> float:
        return PAD + len(self.lines) * LINE + PAD // 2


def box(cls: str, first: str, *rest: str | Line, min_width: float = 0.0) -> Box:
    lines = [Line(_shorten(first), "head")]
    for item in rest:
        lines.append(item if isinstance(item, Line) else Line(_shorten(item)))
    return Box(cls, lines, min_width)


@record
class Canvas:
    items: list[str] = field(default_factory=list)
    right: float = 0.0
    bottom: float = 0.0

    def _extend(self, x: float, y: float) -> None:
        self.right = max(self.right, x)
        self.bottom = max(self.bottom, y)

    def text(self, x: float, y: float, value: str, size: int, style: str = "") -> None:
        value = printable(value)
        cls = f' class="t-{style}"' if style else ""
        self.items.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}"{cls}>{escape(value)}</text>'
        )
        self._extend(x + _text_width(value, size), y + size * 0.3)

    def rect(self, x: float, y: float, w: float, h: float, cls: str, rx: int = 6) -> None:
        self.items.append(
            f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'rx="{rx}"/>'
        )
        self._extend(x + w, y + h)

    def line(self, x1: float, y1: float, x2: float, y2: float, cls: str, arrow: str = "") -> None:
        end = f' marker-end="url(#{arrow})"' if arrow else ""
        self.items.append(
            f'<line class="{cls}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"{end}/>'
        )

    def draw(self, b: Box) -> None:
        self.rect(b.x, b.y, b.width, b.height, b.cls)
        for i, ln in enumerate(b.lines):
            self.text(b.x + PAD, b.y + PAD + i * LINE + ln.size * 0.85, ln.text, ln.size, ln.style)


def _flow(boxes: list[Box], x0: float, y0: float, max_width: float = MAX_ROW) -> float:
    """Place boxes left to right, wrapping at ``max_width``; returns the bottom."""
    x, y, row_h = x0, y0, 0.0
    for b in boxes:
        if x > x0 and x + b.width > x0 + max_width:
            x, y, row_h = x0, y + row_h + GAP, 0.0
        b.x, b.y = x, y
        x += b.width + GAP
        row_h = max(row_h, b.height)
    return y + row_h


# --- what goes in the boxes ----------------------------------------------------------------


def _listing(cls: str, title: str, rows: list[str], empty: str) -> Box:
    shown = rows[:MAX_LIST]
    lines: list[str | Line] = [*shown] if shown else [Line(empty, "dim")]
    if len(rows) > len(shown):
        lines.append(Line(f"… and {len(rows) - len(shown)} more", "dim"))
    return box(cls, title, *lines)


def _addresses(addresses: list[str]) -> list[str | Line]:
    return [*addresses] if addresses else [Line("no address", "dim")]


def _uplinks(state: NodeState, pod_veths: set[str]) -> list[Box]:
    out = []
    for iface in state.interfaces:
        if iface.name == "lo":
            continue
        out.append(
            box(
                "uplink",
                f"{iface.name} ({iface.kind or 'link'}, {'up' if iface.up else 'down'})",
                *_addresses(iface.addresses),
            )
        )
    for veth in state.veths:
        if veth.master is not None or veth.name in pod_veths:
            continue
        far = f"{veth.peer.namespace}:{veth.peer.name}" if veth.peer else "peer not found"
        far_addrs = veth.peer.addresses[:2] if veth.peer else []
        out.append(
            box(
                "uplink",
                f"{veth.name} (veth, {'up' if veth.up else 'down'})",
                *_addresses(veth.addresses),
                Line(f"═ {far}", "dim"),
                *(Line(f"  {a}", "dim") for a in far_addrs),
            )
        )
    return out


def _routes(state: NodeState) -> Box:
    rows = []
    for r in state.routes:
        parts = [r.dst]
        if r.gateway:
            parts.append(f"via {r.gateway}")
        if r.dev:
            parts.append(f"dev {r.dev}")
        rows.append(" ".join(parts))
    return _listing("routes", f"Routes ({len(rows)})", rows, "none")


def _networks(state: NodeState) -> Box:
    rows = []
    for n in state.networks:
        if n.error:
            rows.append(Line(_shorten(f"{n.name or n.file}: {n.error}"), "leak"))
        else:
            rows.append(Line(_shorten(f"{n.name} {n.cni_version}: {' → '.join(n.plugins)}")))
    shown: list[str | Line] = [*rows[:MAX_LIST]] or [Line("none in the conf dir", "dim")]
    if len(rows) > MAX_LIST:
        shown.append(Line(f"… and {len(rows) - MAX_LIST} more", "dim"))
    return box("networks", f"Networks ({len(rows)})", *shown)


def _daemon(state: NodeState) -> Box:
    d = state.daemon
    if d is None:
        return box("daemon-off", "pycni daemon", Line("not checked", "dim"))
    reason = d.chosen_because.removeprefix("given").removeprefix("; ")
    why = [Line(reason, "dim")] if reason else []
    if not d.answers:
        return box(
            "daemon-off",
            "pycni daemon: not running",
            "calls run in-process",
            Line("(the entry points run the", "dim"),
            Line("plugins themselves)", "dim"),
            Line(d.socket, "dim"),
            *why,
        )
    facts = [f"pid {d.pid}"] if d.pid is not None else []
    if d.workers is not None:
        facts.append(f"{d.workers} workers")
    lines: list[str | Line] = []
    if d.status == "other mount namespace":
        lines += ["serves the node's calls;", "calls from this process's", "mount namespace run"]
        lines.append("in-process")
    else:
        lines.append(f"serves every call ({d.status or 'ok'})")
    if facts:
        lines.append(", ".join(facts))
    if d.started_by:
        lines.append(Line(_shorten(d.started_by, 60), "dim"))
    lines += [Line(d.socket, "dim"), *why]
    return box("daemon", "pycni daemon: answering", *lines)


def _masquerade(state: NodeState) -> Box:
    rows: list[str | Line] = []
    for m in state.masquerades[:MAX_LIST]:
        count = _count(len(m.addresses), "pod")
        rows.append(_shorten(f"{m.network}: {m.subnet or 'per address'} → node address ({count})"))
    if not rows:
        rows = [Line("none", "dim")]
    return box("networks", f"Masquerade ({len(state.masquerades)})", *rows)


@record
class Cell:
    """One port: the host veth over its pod."""

    veth: Box
    pod: Box


def _pod_cell(veth: Veth, leaked: set[str], published: dict[str, list[PortMapping]]) -> Cell:
    is_leak = veth.name in leaked
    host_lines: list[str | Line] = [Line("LEAKED", "leak")] if is_leak else []
    if veth.peer is not None:
        addr_lines: list[str | Line] = []
        for i, addr in enumerate(veth.peer.addresses or ["(no address)"]):
            label = veth.peer.name if i == 0 else ""
            addr_lines.append(f"{label:<5} {addr}")
        for m in (m for a in veth.peer.addresses for m in published.get(a.split("/")[0], [])):
            addr_lines.append(Line(f"← node {m.protocol}/{m.host_port} → :{m.target_port}", "dim"))
        pod = box("leak" if is_leak else "pod", veth.peer.namespace, *addr_lines)
    else:
        pod = box(
            "leak" if is_leak else "pod",
            "(peer not found)",
            Line(f"peer ifindex {veth.peer_index}", "dim"),
        )
    return Cell(box("leak" if is_leak else "veth", veth.name, *host_lines), pod)


def _groups(state: NodeState, pod_veths: set[str]) -> list[tuple[str | None, list[Veth]]]:
    """(bridge name or None, its veths) in display order."""
    groups: list[tuple[str | None, list[Veth]]] = [
        (bridge.name, [v for v in state.veths if v.master == bridge.name])
        for bridge in state.bridges
    ]
    bridges = {b.name for b in state.bridges}
    loose = [
        v
        for v in state.veths
        if (v.master is None and v.name in pod_veths)
        or (v.master is not None and v.master not in bridges)
    ]
    if loose:
        groups.append((None, loose))
    return groups


def _mapping_key(m: PortMapping) -> str:
    return f"{m.family} {m.table} {m.chain} handle {m.handle}"


def _pod_names(state: NodeState) -> dict[str, str]:
    """Pod address (no prefix) → namespace name."""
    out = {}
    for veth in state.veths:
        if veth.peer is not None:
            for addr in veth.peer.addresses:
                out[addr.split("/")[0]] = veth.peer.namespace
    for att in state.attachments:
        for addr in att.ips:
            out.setdefault(addr.split("/")[0], att.container_id[:16])
    return out


# --- drawing --------------------------------------------------------------------------------


def _draw_group(
    canvas: Canvas, title: Box | None, cells: list[Cell], x0: float, y0: float
) -> float:
    """A bridge bar (or a caption) with its ports in rows below it; returns the bottom."""
    col_w = max([c.veth.width for c in cells] + [c.pod.width for c in cells] + [150.0])
    per_row = max(1, min(len(cells), int((MAX_ROW + GAP) // (col_w + GAP))))
    row_w = per_row * col_w + (per_row - 1) * GAP if cells else 0.0
    y = y0
    wired = title is not None and title.cls == "bridge"
    trunk_x = x0 - NODE_PAD / 2
    if title is not None:
        title.min_width = max(title.min_width, row_w)
        title.x, title.y = x0, y
        canvas.draw(title)
        y += title.height
        if wired and cells:
            canvas.line(trunk_x, title.y + title.height / 2, x0, title.y + title.height / 2, "wire")
    veth_h = max([c.veth.height for c in cells] + [0.0])
    pod_h = max([c.pod.height for c in cells] + [0.0])
    drop, pair_len = 12.0, 26.0
    last_bus = y
    for start in range(0, len(cells), per_row):
        row = cells[start : start + per_row]
        bus_y = y + drop
        if wired:
            last_mid = x0 + (len(row) - 1) * (col_w + GAP) + col_w / 2
            canvas.line(trunk_x, bus_y, last_mid, bus_y, "wire")
            last_bus = bus_y
        for i, cell in enumerate(row):
            x = x0 + i * (col_w + GAP)
            mid = x + col_w / 2
            cell.veth.min_width = cell.pod.min_width = col_w
            cell.veth.x, cell.veth.y = x, bus_y + drop
            cell.pod.x, cell.pod.y = x, cell.veth.y + veth_h + pair_len
            if wired:
                canvas.line(mid, bus_y, mid, cell.veth.y, "wire")
            canvas.draw(cell.veth)
            canvas.line(mid, cell.veth.y + cell.veth.height, mid, cell.pod.y, "pair")
            canvas.draw(cell.pod)
        y = bus_y + drop + veth_h + pair_len + pod_h + GAP
    if wired and cells and title is not None:
        canvas.line(trunk_x, title.y + title.height / 2, trunk_x, last_bus, "wire")
    return y


def _draw_mappings(
    canvas: Canvas, state: NodeState, leaked: set[str], x0: float, y0: float
) -> float:
    names = _pod_names(state)
    items = []
    for m in state.port_mappings:
        is_leak = _mapping_key(m) in leaked
        host = box(
            "leak" if is_leak else "hostport",
            f"node {m.protocol}/{m.host_port}",
            *([Line(f"on {m.host_ip}", "dim")] if m.host_ip else []),
            *([Line("LEAKED", "leak")] if is_leak else []),
        )
        target = box(
            "leak" if is_leak else "pod",
            names.get(m.target_ip, "no pod has this address"),
            f"{m.target_ip}:{m.target_port}",
        )
        items.append((host, target, is_leak))
    if not items:
        return y0
    canvas.text(x0, y0 + FS_HEAD, f"Port mappings ({len(items)}): host port → pod", FS_HEAD, "head")
    y0 += LINE + 6
    arrow = 54.0
    pair_w = max(h.width for h, _t, _l in items) + arrow + max(t.width for _h, t, _l in items)
    per_row = max(1, int((MAX_ROW + GAP) // (pair_w + GAP * 2)))
    y = y0
    for start in range(0, len(items), per_row):
        row = items[start : start + per_row]
        row_h = max(max(h.height, t.height) for h, t, _l in row)
        for i, (host, target, is_leak) in enumerate(row):
            x = x0 + i * (pair_w + GAP * 2)
            host.min_width = max(h.width for h, _t, _l in items)
            host.x, host.y = x, y
            target.x, target.y = x + host.width + arrow, y
            canvas.draw(host)
            canvas.draw(target)
            mid_y = y + min(host.height, target.height) / 2
            canvas.line(
                host.x + host.width + 3,
                mid_y,
                target.x - 4,
                mid_y,
                "arrow-leak" if is_leak else "arrow",
                arrow="head-leak" if is_leak else "head",
            )
        y += row_h + GAP
    return y


def _leak_box(leaks: list[Leak]) -> Box:
    if not leaks:
        return box("noleaks", "Leaks: none", Line("nothing left behind", "ok"))
    rows = [Line(_shorten(f"{lk.kind}: {lk.subject}", 96), "leak") for lk in leaks]
    reasons = [Line("  " + _shorten(lk.reason, 94), "dim") for lk in leaks]
    lines: list[str | Line] = []
    for row, reason in list(zip(rows, reasons, strict=True))[: MAX_LIST // 2]:
        lines += [row, reason]
    if len(leaks) > MAX_LIST // 2:
        lines.append(Line(f"… and {len(leaks) - MAX_LIST // 2} more", "dim"))
    head = box("leaks", f"Leaks ({len(leaks)}): `pycni cleanup` removes them", *lines)
    head.lines[0].style = "leak"
    return head


def _leaked_subjects(leaks: Iterable[Leak]) -> set[str]:
    return {lk.subject for lk in leaks if lk.kind in ("veth", "mapping")}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _marker(name: str, colour: str) -> str:
    return (
        f'<marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
    )


def render(state: NodeState, leaks: list[Leak] | None = None) -> str:
    """The whole picture as an SVG document."""
    leaks = list(leaks or [])
    leaked = _leaked_subjects(leaks)
    pod_veths = {name for a in state.attachments for name in a.host_interfaces}
    published: dict[str, list[PortMapping]] = {}
    for m in state.port_mappings:
        published.setdefault(m.target_ip, []).append(m)

    canvas = Canvas()
    canvas.text(MARGIN, MARGIN + FS_TITLE, f"CNI on node {state.netns}", FS_TITLE, "title")
    where = f"conf {state.conf_dir} · cache {state.cache_dir} · data {state.data_dir}"
    canvas.text(MARGIN, MARGIN + FS_TITLE + LINE + 2, _shorten(where, 160), FS, "dim")
    node_top = MARGIN + FS_TITLE + LINE + 14
    x0 = MARGIN + NODE_PAD
    frame_index = len(canvas.items)

    top = [
        *_uplinks(state, pod_veths),
        _routes(state),
        _networks(state),
        _masquerade(state),
        _daemon(state),
    ]
    y = _flow(top, x0, node_top + NODE_PAD) + GAP * 2
    for b in top:
        canvas.draw(b)

    for bridge_name, veths in _groups(state, pod_veths):
        cells = [_pod_cell(v, leaked, published) for v in veths]
        if bridge_name is not None:
            bridge = next(b for b in state.bridges if b.name == bridge_name)
            title = box(
                "bridge",
                f"bridge {bridge.name}",
                f"{', '.join(bridge.addresses) or 'no address'}  ·  "
                f"{'up' if bridge.up else 'down'}  ·  {_count(len(veths), 'port')}",
            )
        else:
            title = box("veth", "veths on no bridge", Line(_count(len(veths), "port"), "dim"))
        y = _draw_group(canvas, title, cells, x0, y) + GAP

    y = _draw_mappings(canvas, state, leaked, x0, y)
    node_bottom = y + NODE_PAD - GAP
    node_right = max(canvas.right + NODE_PAD, x0 + 300)
    frame = (
        f'<rect class="node" x="{MARGIN}" y="{node_top:.1f}" width="{node_right - MARGIN:.1f}" '
        f'height="{node_bottom - node_top:.1f}" rx="10"/>'
    )
    canvas.items.insert(frame_index, frame)
    canvas.right, canvas.bottom = max(canvas.right, node_right), max(canvas.bottom, node_bottom)

    leak_box = _leak_box(leaks)
    leak_box.x, leak_box.y = MARGIN, node_bottom + GAP
    canvas.draw(leak_box)

    width = int(canvas.right + MARGIN + 0.5)
    height = int(canvas.bottom + MARGIN + 0.5)
    body = "\n".join(canvas.items)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{FONT}" xml:space="preserve">\n'
        f"<style>{_STYLE}</style>\n"
        f"<defs>{_marker('head', '#3b6fd8')}{_marker('head-leak', '#d0021b')}</defs>\n"
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>\n'
        f"{body}\n</svg>\n"
    )
