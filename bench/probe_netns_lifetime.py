"""How long a pod's network namespace lives after its netns file and its last process go,
and which of what a long-lived process (the warm daemon) keeps per namespace holds it longer.

Each trial makes a node and a pod joined by a veth, does some work inside the pod on this
thread, comes back, and removes the pod's netns file; the node's end of the veth goes when,
and only when, the kernel destroys the pod's namespace. Then: after a process held the pod
and used a netlink socket inside it, how long the node can still read the pod's addresses by
its nsid (what GC does, net/nsscan.py) once that process has exited. Run as root:
``bench/probe_netns_lifetime.py`` (docs/daemon.md, "A pod outlives its last process by
milliseconds").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pycni.net.ns import NetNS
from pycni.playground import create_netns, delete_netns, netns_path

PREFIX = f"plife{os.getpid() % 10000}-"
HOLD = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def _ip(*argv: str, netns: str = "") -> str:
    cmd = ["ip", *(("-n", netns) if netns else ()), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def kept_sysctl_dirs() -> None:
    from pycni.net import thread_sysctl

    thread_sysctl.read("net/ipv4/conf/eth0/arp_ignore")
    thread_sysctl.read("net/ipv6/conf/eth0/accept_dad")


def closed_rtnetlink_client() -> None:
    from pycni.net.netlink.client import rtnl

    with rtnl() as kernel:
        kernel.links()


def kept_nfnetlink_socket() -> None:
    from pycni.net.netlink import nfnetlink

    nfnetlink.connection()


def kept_libnftables_context() -> None:
    from pycni.net.netfilter import nft

    nft.query("list tables")


def nothing() -> None:
    return None


WORK: list[Callable[[], None]] = [
    nothing,
    closed_rtnetlink_client,
    kept_sysctl_dirs,
    kept_nfnetlink_socket,
    kept_libnftables_context,
]


def pair(n: int) -> tuple[str, str]:
    node, pod = f"{PREFIX}n{n}", f"{PREFIX}p{n}"
    create_netns(node)
    create_netns(pod)
    _ip("link", "add", "vlife0", "type", "veth", "peer", "eth0", "netns", pod, netns=node)
    _ip("addr", "add", "10.213.55.2/24", "dev", "eth0", netns=pod)
    _ip("link", "set", "eth0", "up", netns=pod)
    return node, pod


def destroyed_after(work: Callable[[], None], n: int, limit: float = 5.0) -> str:
    node, pod = pair(n)
    try:
        with NetNS.open(netns_path(pod)) as ns, ns.entered():
            work()
        delete_netns(pod)
        start = time.monotonic()
        while time.monotonic() - start < limit:
            if "vlife0" not in _ip("-o", "link", netns=node):
                return f"destroyed after {(time.monotonic() - start) * 1000:.0f} ms"
            time.sleep(0.01)
        return f"still alive after {limit:.0f} s: this process holds it"
    finally:
        delete_netns(pod)
        delete_netns(node)


def readable_after_holder(n: int, with_socket: bool) -> float:
    """ms during which the node still reads the pod's address by nsid after the pod's last
    process (which used a netlink socket inside it, or not) was reaped."""
    from pycni.net import nsscan

    node, pod = pair(n)
    try:
        holder = subprocess.Popen(
            ["nsenter", f"--net={netns_path(pod)}", "--", sys.executable, "-c", HOLD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None and holder.stdin is not None
        holder.stdout.readline()
        delete_netns(pod)
        if with_socket:
            subprocess.run(
                ["nsenter", f"--net=/proc/{holder.pid}/ns/net", "--", "ip", "addr"],
                capture_output=True,
                check=True,
            )
        holder.stdin.close()
        holder.wait()
        start, seen = time.monotonic(), 0.0
        with NetNS.open(netns_path(node)) as ns, ns.entered():
            while time.monotonic() - start < 5:
                linked = nsscan.linked_addresses()
                if not any("10.213.55.2" in found for found in linked.values()):
                    break
                seen = time.monotonic() - start
        return seen * 1000
    finally:
        delete_netns(pod)
        delete_netns(node)


def main() -> int:
    if os.geteuid() != 0:
        print("probe: must run as root", file=sys.stderr)
        return 1
    print("work done inside the pod by this (still running) process, then its file removed:")
    for n, work in enumerate(WORK):
        print(f"  {work.__name__:26} {destroyed_after(work, n)}", flush=True)
    print("the pod's address still read by nsid after its last process was reaped (ms, 5 runs):")
    for with_socket in (False, True):
        runs = [readable_after_holder(100 + k, with_socket) for k in range(5)]
        label = "after `ip addr` inside it" if with_socket else "no socket used inside it"
        print(f"  {label:26} " + " ".join(f"{ms:.1f}" for ms in runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
