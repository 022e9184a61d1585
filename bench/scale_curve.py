"""ADD and DEL latency against the number of pods on a node: pycni, the Go chain, the kernel.

Used by bench/run.py (`make bench`). Every pod gets one port mapping and the bridge masquerades
(ipMasq), so each per-pod structure (veth, bridge port, reservation, masquerade entry, port
mapping) is there. Pods are added one after another, each implementation in its own node
namespace, interleaved; then deleted newest first. The kernel floor does the kernel's part of
the same pod in-process with pycni's netlink client and nothing else: a veth created with its
peer in the pod, the host end on the bridge and up, the pod's loopback up, its address, its
link up and its default route, then the wait until the bridge port is operationally up (which
a plugin must see before it answers: the reference's and pycni's bridge both wait for it);
DEL removes the pod's link. Its curve is what the kernel alone costs as pods accumulate on
one bridge.
"""

from __future__ import annotations

import ipaddress
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pycni.net import link, thread_sysctl  # noqa: E402
from pycni.net.link import wait_oper_up  # noqa: E402
from pycni.net.netlink.client import rtnl  # noqa: E402
from pycni.net.netlink.kernel import Route  # noqa: E402
from pycni.net.ns import NetNS  # noqa: E402

BUCKET = 10
FLOOR = "kernel floor"
FLOOR_PYCNI = "kernel floor, pycni's port"


@dataclass
class Curve:
    """Milliseconds per operation: ``adds[k]`` is the ADD that found k pods on the node,
    ``dels[k]`` the DEL that found k + 1 (so both are indexed by the pods already there)."""

    label: str
    adds: list[float] = field(default_factory=list)
    dels: dict[int, float] = field(default_factory=dict)
    cpu_adds: list[float] = field(default_factory=list)  # CPU ms of the same calls
    cpu_dels: dict[int, float] = field(default_factory=dict)

    def add_bucket(self, start: int, cpu: bool = False) -> float:
        return statistics.median((self.cpu_adds if cpu else self.adds)[start : start + BUCKET])

    def del_bucket(self, start: int, cpu: bool = False) -> float:
        dels = self.cpu_dels if cpu else self.dels
        values = [dels[k] for k in range(start, start + BUCKET) if k in dels]
        return statistics.median(values)


@contextmanager
def inside(path: str) -> Iterator[None]:
    with NetNS.open(path) as ns, ns.entered():
        yield


class KernelFloor:
    """The kernel steps of a bridge pod, in-process, in their own node namespace.

    ``pycni_port``: the host end as pycni's bridge makes it (enslaved in the creating request,
    IPv6 disabled before it is up) instead of the reference's way (created, enslaved, up, with
    IPv6 and its link-local address): the difference is the kernel's alone."""

    def __init__(self, node_path: str, pycni_port: bool = False) -> None:
        self.node_path = node_path
        self.bridge_index = 0
        self.pycni_port = pycni_port

    def setup(self) -> None:
        with inside(self.node_path), rtnl() as kernel:
            kernel.add_bridge("cni0")
            self.bridge_index = link.index_of(kernel, "cni0")
            kernel.add_address(self.bridge_index, ipaddress.ip_interface("10.98.0.1/16"))
            kernel.set_link(self.bridge_index, up=True)

    def add(self, k: int, pod_path: str) -> float:
        address = f"10.98.{1 + k // 250}.{2 + k % 250}"
        with NetNS.open(pod_path) as pod, inside(self.node_path):
            start = time.perf_counter()
            with rtnl() as kernel:
                host = f"vfl{k:05d}"
                if self.pycni_port:
                    index = kernel.add_veth(host, "eth0", pod.fd, master=self.bridge_index)
                    index = index or link.index_of(kernel, host)
                    thread_sysctl.write(f"net/ipv6/conf/{host}/disable_ipv6", "1")
                    kernel.set_link(index, up=True)
                else:
                    kernel.add_veth(host, "eth0", pod.fd)
                    index = link.index_of(kernel, host)
                    kernel.set_link(index, master=self.bridge_index)
                    kernel.set_link(index, up=True)
                with pod.entered(), rtnl() as pod_kernel:
                    pod_kernel.set_link(link.index_of(pod_kernel, "lo"), up=True)
                    pod_index = link.index_of(pod_kernel, "eth0")
                    pod_kernel.add_address(pod_index, ipaddress.ip_interface(f"{address}/16"))
                    pod_kernel.set_link(pod_index, up=True)
                    pod_kernel.add_route(
                        Route(
                            ipaddress.ip_network("0.0.0.0/0"),
                            oif=pod_index,
                            gateway=ipaddress.ip_address("10.98.0.1"),
                        )
                    )
                up, _state = wait_oper_up(kernel, index)
                assert up, f"floor: port of pod {k} did not come up"
            return (time.perf_counter() - start) * 1000

    def delete(self, pod_path: str) -> float:
        with NetNS.open(pod_path) as pod, pod.entered():
            start = time.perf_counter()
            with rtnl() as pod_kernel:
                pod_kernel.delete_link(link.index_of(pod_kernel, "eth0"))
            return (time.perf_counter() - start) * 1000


@dataclass
class Runner:
    """One implementation: how to add pod k (returns ms) and delete it (returns ms)."""

    curve: Curve
    limit: int
    add: Callable[[int], float]
    delete: Callable[[int], float]
    cpu_ns: Callable[[], int] | None = None  # CPU clock of the implementation's work


def measure(
    runners: list[Runner],
    progress: Callable[[str], None],
    before_add: dict[int, Callable[[], None]] | None = None,
    before_del: dict[int, Callable[[], None]] | None = None,
) -> None:
    """ADD pods 0..limit-1 for every runner, interleaved; then DEL newest first. The hooks
    run before the ADD (DEL) of pod k: a daemon restart, a burst of concurrent calls."""
    top = max(r.limit for r in runners)
    for k in range(top):
        if before_add and k in before_add:
            before_add[k]()
        for r in runners:
            if k < r.limit:
                before = r.cpu_ns() if r.cpu_ns else 0
                r.curve.adds.append(r.add(k))
                if r.cpu_ns:
                    r.curve.cpu_adds.append((r.cpu_ns() - before) / 1e6)
        if k % 100 == 99:
            progress(f"  scale: {k + 1}/{top} pods added")
    for k in reversed(range(top)):
        if before_del and k in before_del:
            before_del[k]()
        for r in runners:
            if k < r.limit:
                before = r.cpu_ns() if r.cpu_ns else 0
                r.curve.dels[k] = r.delete(k)
                if r.cpu_ns:
                    r.curve.cpu_dels[k] = (r.cpu_ns() - before) / 1e6
        if k % 100 == 0:
            progress(f"  scale: {top - k}/{top} pods deleted")


def checkpoints(top: int) -> list[int]:
    """Bucket starts reported in the table: the first, the Go limit's last, the last."""
    marks = [0, 90, 290, 490, 990]
    return [m for m in marks if m + BUCKET <= top]


def table(curves: list[Curve], top: int) -> str:
    """Bucket medians (ms) at a few pod counts, and pycni's ratio to its first bucket and to
    the kernel floor."""
    by_label = {c.label: c for c in curves}
    pycni = next(c for c in curves if c.label.startswith("pycni"))
    floor = by_label.get(FLOOR)
    head = ["pods", *(f"{c.label} {op}" for op in ("ADD", "DEL") for c in curves)]
    head += [f"{pycni.label} / floor ADD", f"{pycni.label} / floor DEL"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for start in checkpoints(top):
        cells = [f"{start + 1}-{start + BUCKET}"]
        for op in ("ADD", "DEL"):
            for c in curves:
                n = len(c.adds)
                if start + BUCKET > n:
                    cells.append("-")
                    continue
                value = c.add_bucket(start) if op == "ADD" else c.del_bucket(start)
                cells.append(f"{value:.1f}")
        for op in ("ADD", "DEL"):
            if floor is None or start + BUCKET > len(floor.adds):
                cells.append("-")
                continue
            ours = pycni.add_bucket(start) if op == "ADD" else pycni.del_bucket(start)
            base = floor.add_bucket(start) if op == "ADD" else floor.del_bucket(start)
            cells.append(f"{ours / base:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(curves: list[Curve], top: int) -> str:
    """Bucket medians of CPU ms per call (what each implementation's processes and the kernel
    on their behalf spent on the CPU: less sensitive to a shared machine's load than wall
    time), and each curve's last bucket over its first."""
    with_cpu = [c for c in curves if c.cpu_adds]
    head = ["pods", *(f"{c.label} {op}" for op in ("ADD", "DEL") for c in with_cpu)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    marks = checkpoints(top)
    for start in marks:
        cells = [f"{start + 1}-{start + BUCKET}"]
        for op in ("ADD", "DEL"):
            for c in with_cpu:
                if start + BUCKET > len(c.cpu_adds):
                    cells.append("-")
                    continue
                value = c.add_bucket(start, True) if op == "ADD" else c.del_bucket(start, True)
                cells.append(f"{value:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    parts = []
    for c in with_cpu:
        last = (len(c.cpu_adds) // BUCKET - 1) * BUCKET
        add = c.add_bucket(last, True) / c.add_bucket(0, True)
        dele = c.del_bucket(last, True) / c.del_bucket(0, True)
        parts.append(f"{c.label}: ADD {add:.2f}x, DEL {dele:.2f}x")
    return "\n".join(lines) + "\n\nCPU, last 10 pods over the first 10: " + "; ".join(parts) + "."


def growth(curve: Curve) -> tuple[float, float]:
    """(ADD, DEL) at the last bucket over the first."""
    last = (len(curve.adds) // BUCKET - 1) * BUCKET
    return (
        curve.add_bucket(last) / curve.add_bucket(0),
        curve.del_bucket(last) / curve.del_bucket(0),
    )


def plot(curves: list[Curve], out: Path, title: str) -> None:
    """ADD and DEL latency (10-pod bucket medians, raw points faint) against the pod count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"go": "tab:red", FLOOR: "tab:gray", FLOOR_PYCNI: "tab:green"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharex=True)
    for ax, op in zip(axes, ("ADD", "DEL"), strict=True):
        for c in curves:
            color = colors.get(c.label, "tab:blue")
            if op == "ADD":
                xs = list(range(1, len(c.adds) + 1))
                ys = c.adds
            else:
                xs = [k + 1 for k in sorted(c.dels)]
                ys = [c.dels[k] for k in sorted(c.dels)]
            ax.scatter(xs, ys, s=2, alpha=0.15, color=color)
            starts = range(0, len(c.adds) - BUCKET + 1, BUCKET)
            med = [c.add_bucket(s) if op == "ADD" else c.del_bucket(s) for s in starts]
            ax.plot([s + BUCKET / 2 for s in starts], med, color=color, label=c.label, lw=1.8)
        ax.set_title(f"{op} latency (one pod, 1 port mapping, ipMasq)")
        ax.set_xlabel("pods already on the node")
        ax.set_ylabel("ms (median of 10 pods; dots: each pod)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
