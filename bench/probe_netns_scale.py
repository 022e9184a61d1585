#!/usr/bin/env python3
"""Which kernel operation of a pod's ADD/DEL costs more as network namespaces accumulate.

Not a test. In a private node namespace with a bridge, COUNT pod namespaces are made, each
with a veth on the bridge and accept_dad written under /proc/sys/net/ipv6 inside (as pycni's
bridge leaves them; pycni sets arp_notify over netlink, so pods no longer open
/proc/sys/net/ipv4). Then each primitive of a bridge ADD/DEL is timed alone (median µs of
several rounds): entering a pod's namespace and back, a netlink socket opened and closed,
a veth created with its peer in a pod and deleted, a pod's link looked up, /proc/sys reads
and writes and their netlink replacements, and the kernel floor ADD (step by step) and DEL
(bench/scale_curve.KernelFloor). With ``--perf DIR`` floor ADDs and DELs run under a
system-wide ``perf record -g -e cpu-clock`` (bench/kernel_perf.py) and the kernel time of
this process per call is printed by syscall, rtnetlink handler and kernel function.

    sudo .venv/bin/python bench/probe_netns_scale.py 10 1000
    sudo .venv/bin/python bench/probe_netns_scale.py --perf /tmp/perf 10 1000
    sudo .venv/bin/python bench/probe_netns_scale.py --pycni-port --perf /tmp/perf2 10 1000
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import probe_proc_sys  # noqa: E402
from kernel_perf import Perf, growth_table, kernel_time_by_syscall, report  # noqa: E402
from scale_curve import KernelFloor, inside  # noqa: E402

from pycni.net import link, thread_sysctl  # noqa: E402
from pycni.net.link import wait_oper_up  # noqa: E402
from pycni.net.netlink.client import rtnl  # noqa: E402
from pycni.net.netlink.kernel import AF_INET, IPV4_DEVCONF_ARP_NOTIFY, Route  # noqa: E402
from pycni.net.netlink.rtnl.wire import Socket  # noqa: E402
from pycni.net.ns import NetNS, entered_fd  # noqa: E402
from pycni.playground import create_netns, delete_netns, netns_path  # noqa: E402

PREFIX = f"pnsc{os.getpid() % 100000}-"
SPARE = 20  # pod namespaces without a veth for the measured ADDs (a bridge takes 1024 ports)
PERF_TABLES: dict[str, dict[int, dict[str, float]]] = {}  # "floor-add" -> pods -> µs by key


def _us(fn: Callable[[], None], rounds: int = 5, calls: int = 40) -> float:
    return probe_proc_sys.per_call_us(fn, rounds=rounds, calls=calls)


def _read_path(path: str) -> None:
    """Open and read by full path (what every /proc/sys access did before the kept fds)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.read(fd, 64)
    finally:
        os.close(fd)


def _write_path(path: str, value: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value)
    finally:
        os.close(fd)


class Node:
    """A node namespace with a bridge, ``count`` pods on it and SPARE empty pod namespaces."""

    def __init__(self, pycni_port: bool = False) -> None:
        self.pycni_port = pycni_port
        self.names: list[str] = []
        self.node = ""
        self.floor: KernelFloor | None = None
        self.pods = 0
        self.spare: list[str] = []

    def _ns(self, name: str) -> str:
        self.names.append(PREFIX + name)
        return create_netns(PREFIX + name)

    def setup(self) -> None:
        self.node = self._ns("node")
        self.floor = KernelFloor(self.node, pycni_port=self.pycni_port)
        self.floor.setup()
        self.spare = [self._ns(f"spare{i}") for i in range(SPARE)]

    def grow(self, count: int) -> None:
        assert self.floor is not None
        while self.pods < count:
            path = self._ns(f"pod{self.pods}")
            self.floor.add(self.pods, path)
            with NetNS.open(path) as pod, pod.entered():  # as pycni's bridge does in a pod
                thread_sysctl.write("net/ipv6/conf/eth0/accept_dad", "0")
            self.pods += 1

    def cleanup(self) -> None:
        for name in reversed(self.names):
            delete_netns(name)


def primitives(node: Node) -> dict[str, float]:
    """Median µs of each kernel operation, with ``node.pods`` pods on the node."""
    assert node.floor is not None
    floor = node.floor
    pod_path = netns_path(PREFIX + "pod0")
    spare = node.spare[0]
    out: dict[str, float] = {}
    with NetNS.open(pod_path) as pod, NetNS.open(spare) as empty, inside(node.node):

        def enter_pod() -> None:
            with entered_fd(pod.fd):
                pass

        def socket_node() -> None:
            Socket().close()

        def socket_raw_node() -> None:
            socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()

        def socket_udp_node() -> None:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()

        def socket_pod() -> None:
            with entered_fd(pod.fd):
                Socket().close()

        def link_lookup_pod() -> None:
            with entered_fd(pod.fd), rtnl() as kernel:
                link.index_of(kernel, "eth0")

        def sysctl_pod() -> None:
            with entered_fd(pod.fd):
                _write_path("/proc/sys/net/ipv6/conf/eth0/accept_dad", b"0")

        def netlink_conf_pod() -> None:
            with entered_fd(pod.fd), rtnl() as kernel:
                kernel.set_ipv4_conf(link.index_of(kernel, "eth0"), {IPV4_DEVCONF_ARP_NOTIFY: 1})

        def ipv4_node() -> None:
            _read_path("/proc/sys/net/ipv4/ip_forward")

        def ipv6_node() -> None:
            _read_path("/proc/sys/net/ipv6/conf/cni0/accept_ra")

        def ipv6_node_kept() -> None:
            thread_sysctl.read("net/ipv6/conf/cni0/accept_ra")

        with rtnl() as kernel:

            def veth_in_pod() -> None:
                kernel.add_veth("pnscprobe", "eth0", empty.fd)
                kernel.delete_link(link.index_of(kernel, "pnscprobe"))

            here = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

            def veth_local() -> None:
                kernel.add_veth("pnscprobe", "pnscpeer", here)
                kernel.delete_link(link.index_of(kernel, "pnscprobe"))

            out["setns into a pod and back"] = _us(enter_pod)
            out["netlink socket open+close (node)"] = _us(socket_node)
            out["raw netlink socket open+close, no bind (node)"] = _us(socket_raw_node)
            out["udp socket open+close (node)"] = _us(socket_udp_node)
            out["netlink socket open+close (pod, incl. setns)"] = _us(socket_pod)
            out["pod link lookup (setns, socket, get)"] = _us(link_lookup_pod)
            out["pod: ipv6 accept_dad write (setns, /proc/sys)"] = _us(sysctl_pod)
            out["pod: arp_notify over netlink (setns, socket, lookup, set)"] = _us(netlink_conf_pod)
            out["node: /proc/sys/net/ipv4/ip_forward read"] = _us(ipv4_node)
            out["node: /proc/sys/net/ipv6/conf/cni0/accept_ra read"] = _us(ipv6_node)
            out["node: the same through pycni.net.thread_sysctl (kept dir fd)"] = _us(
                ipv6_node_kept
            )
            out["node: forwarding over netlink (RTM_GETNETCONF)"] = _us(
                lambda: kernel.forwarding(AF_INET)
            )
            out["node: bridge link lookup (RTM_GETLINK)"] = _us(
                lambda: kernel.link(floor.bridge_index)
            )
            out["veth with peer in a pod + delete"] = _us(veth_in_pod, rounds=3, calls=10)
            out["veth both ends in node + delete"] = _us(veth_local, rounds=3, calls=10)
            os.close(here)
    adds, dels = floor_rounds(node, SPARE)
    out["kernel floor ADD"] = statistics.median(adds) * 1000
    out["kernel floor DEL"] = statistics.median(dels) * 1000
    if floor.pycni_port:
        return out  # the steps below are the reference's order
    steps: dict[str, list[float]] = {}
    for i, path in enumerate(node.spare):
        floor_add_steps(floor, 50000 + i, path, steps)
    for path in node.spare:
        floor.delete(path)
    for what, values in steps.items():
        out[what] = statistics.median(values)
    return out


def floor_add_steps(
    floor: KernelFloor, k: int, pod_path: str, steps: dict[str, list[float]]
) -> None:
    """KernelFloor.add, each kernel step timed on its own (µs into ``steps``)."""
    address = f"10.98.{1 + k // 250}.{2 + k % 250}"

    def note(what: str, since: float) -> float:
        now = time.perf_counter()
        steps.setdefault(what, []).append((now - since) * 1e6)
        return now

    with NetNS.open(pod_path) as pod, inside(floor.node_path):
        t = time.perf_counter()
        with rtnl() as kernel:
            t = note("floor: node socket open", t)
            host = f"vfl{k:05d}"
            kernel.add_veth(host, "eth0", pod.fd)
            t = note("floor: veth with peer in pod", t)
            index = link.index_of(kernel, host)
            t = note("floor: host link lookup", t)
            kernel.set_link(index, master=floor.bridge_index)
            t = note("floor: set master (bridge port)", t)
            kernel.set_link(index, up=True)
            t = note("floor: host end up", t)
            with entered_fd(pod.fd):
                t = note("floor: setns into pod", t)
                with rtnl() as pod_kernel:
                    t = note("floor: pod socket open", t)
                    pod_kernel.set_link(link.index_of(pod_kernel, "lo"), up=True)
                    pod_index = link.index_of(pod_kernel, "eth0")
                    t = note("floor: pod lo up + eth0 lookup", t)
                    pod_kernel.add_address(pod_index, ipaddress.ip_interface(f"{address}/16"))
                    t = note("floor: pod address", t)
                    pod_kernel.set_link(pod_index, up=True)
                    t = note("floor: pod eth0 up", t)
                    pod_kernel.add_route(
                        Route(
                            ipaddress.ip_network("0.0.0.0/0"),
                            oif=pod_index,
                            gateway=ipaddress.ip_address("10.98.0.1"),
                        )
                    )
                    t = note("floor: pod default route", t)
                t = note("floor: pod socket close", t)
            t = note("floor: setns back", t)
            up, _state = wait_oper_up(kernel, index)
            assert up
            t = note("floor: wait port oper up", t)
        note("floor: node socket close", t)


def floor_rounds(node: Node, n: int) -> tuple[list[float], list[float]]:
    """``n`` floor ADDs then DELs on the spare namespaces (ms each)."""
    assert node.floor is not None
    adds: list[float] = []
    dels: list[float] = []
    for i in range(n):
        path = node.spare[i % SPARE]
        adds.append(node.floor.add(50000 + i, path))
        dels.append(node.floor.delete(path))
    return adds, dels


def perf_floor(node: Node, out_dir: Path, passes: int = 5) -> None:
    """Floor ADDs on every spare namespace then their DELs, ``passes`` times; the ADDs and the
    DELs are recorded into separate files (out_dir/floor-{add,del}-PODS.{data,txt})."""
    assert node.floor is not None
    floor = node.floor

    def adds() -> None:
        for i, path in enumerate(node.spare):
            floor.add(50000 + i, path)

    def dels() -> None:
        for path in node.spare:
            floor.delete(path)

    add_perf = Perf(out_dir / f"floor-add-{node.pods}.data")
    del_perf = Perf(out_dir / f"floor-del-{node.pods}.data")
    try:
        for _ in range(passes):
            add_perf.run(adds)
            del_perf.run(dels)
    finally:
        add_perf.stop()
        del_perf.stop()
    calls = passes * SPARE
    for perf in (add_perf, del_perf):
        report(perf.data, perf.data.with_suffix(".txt"))
        table = kernel_time_by_syscall(perf.data, os.getpid(), calls)
        PERF_TABLES.setdefault(perf.data.stem.rsplit("-", 1)[0], {})[node.pods] = table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("counts", nargs="*", type=int, default=[10, 1000])
    parser.add_argument("--perf", type=Path, help="also profile the floor loop into this dir")
    parser.add_argument(
        "--pycni-port",
        action="store_true",
        help="every pod's host end as pycni's bridge makes it (enslaved at creation, no IPv6)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("probe_netns_scale: must run as root", file=sys.stderr)
        return 1
    counts = sorted(args.counts)
    results: dict[int, dict[str, float]] = {}
    node = Node(pycni_port=args.pycni_port)
    try:
        node.setup()
        for count in counts:
            node.grow(count)
            time.sleep(2)  # let the last namespaces' async work settle
            results[count] = primitives(node)
            if args.perf:
                args.perf.mkdir(parents=True, exist_ok=True)
                perf_floor(node, args.perf)
            print(f"  {count} pods: done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    finally:
        node.cleanup()
    print("| median µs | " + " | ".join(f"{c} pod namespaces" for c in counts) + " | ratio |")
    print("|---|" + "---|" * (len(counts) + 1))
    for what in results[counts[0]]:
        cells = " | ".join(f"{results[c][what]:.0f}" for c in counts)
        ratio = results[counts[-1]][what] / results[counts[0]][what]
        print(f"| {what} | {cells} | {ratio:.2f}x |")
    for name, tables in PERF_TABLES.items():
        print(f"\n{name}: kernel time of this process per call, by syscall > function")
        print(growth_table(tables))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
