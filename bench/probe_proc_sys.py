"""How a /proc/sys access costs more with the number of network namespaces, and which walk grows.

Creates N namespaces, reads one IPv4 sysctl inside each (as a plugin's pod-side write does),
then times, from the calling namespace, opening and reading: an IPv4 entry by path, the same
relative to a directory fd of /proc/sys/net and of /proc/sys/net/ipv4, an IPv6 entry no other
namespace looked at, and a /proc/sys/kernel entry. Run it at two counts and compare
(docs/benchmarks.md): ``bench/probe_proc_sys.py 10 1000``.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pycni.playground import create_netns, delete_netns, netns_path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def _read(path: str, dir_fd: int | None = None) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.read(fd, 64)
    finally:
        os.close(fd)


def per_call_us(fn: Callable[[], None], rounds: int = 7, calls: int = 200) -> float:
    """Median over ``rounds`` of the µs per call of ``fn`` called ``calls`` times."""
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_round.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(per_round)


def probe(count: int) -> dict[str, float]:
    prefix = f"pprs{os.getpid() % 100000}-"
    names = [f"{prefix}{i}" for i in range(count)]
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    net = os.open("/proc/sys/net", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    ipv4 = os.open("/proc/sys/net/ipv4", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names:
            create_netns(name)
            fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
                _read("/proc/sys/net/ipv4/conf/lo/arp_notify")
            finally:
                os.close(fd)
                _setns(home)
        return {
            "ipv4 by path": per_call_us(lambda: _read("/proc/sys/net/ipv4/ip_forward")),
            "ipv4 below a /proc/sys/net fd": per_call_us(lambda: _read("ipv4/ip_forward", net)),
            "ipv4 below a /proc/sys/net/ipv4 fd": per_call_us(lambda: _read("ip_forward", ipv4)),
            "ipv6 by path (no other namespace read one)": per_call_us(
                lambda: _read("/proc/sys/net/ipv6/conf/lo/accept_dad")
            ),
            "kernel by path": per_call_us(lambda: _read("/proc/sys/kernel/hostname")),
        }
    finally:
        _setns(home)
        for name in names:
            delete_netns(name)
        for fd in (home, net, ipv4):
            os.close(fd)


def main() -> int:
    if os.geteuid() != 0:
        print("probe_proc_sys: must run as root", file=sys.stderr)
        return 1
    counts = [int(arg) for arg in sys.argv[1:]] or [10, 1000]
    results = {count: probe(count) for count in counts}
    print("| open + read, median µs | " + " | ".join(f"{c} namespaces" for c in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for what in results[counts[0]]:
        cells = " | ".join(f"{results[c][what]:.1f}" for c in counts)
        print(f"| {what} | {cells} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
