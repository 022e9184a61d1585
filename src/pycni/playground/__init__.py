"""Throw-away named namespaces and child processes: the one helper module for the demo, the
cluster playground, the benchmarks and the test harness.

The demo and the cluster build their networks with ip(8) in named namespaces under /run/netns,
record every namespace they made in a state file as soon as it exists (so ``down`` can remove a
half-made setup), and find their own background processes again by pid and command line.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence

NETNS_DIR = "/run/netns"


def netns_path(name: str) -> str:
    return f"{NETNS_DIR}/{name}"


def run_ip(argv: Sequence[str], error: Callable[[str], Exception]) -> None:
    """``ip ARGV``; a failure raises ``error("ip ARGV: <ip's stderr>")``."""
    proc = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise error(f"ip {' '.join(argv)}: {proc.stderr.strip()}")


def create_netns(name: str) -> str:
    """Create namespace ``name`` with lo up; returns its path. Raises CalledProcessError."""
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True)
    return netns_path(name)


def delete_netns(name: str) -> None:
    """Delete namespace ``name`` if it exists (best effort: it may be gone already)."""
    if os.path.exists(netns_path(name)):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def add_namespace(
    name: str, created: list[str], save: Callable[[], None], error: Callable[[str], Exception]
) -> None:
    """Create namespace ``name``, record it in ``created`` and ``save`` at once, set lo up."""
    run_ip(["netns", "add", name], error)
    created.append(name)
    save()
    run_ip(["-n", name, "link", "set", "lo", "up"], error)


def remove_namespaces(created: Sequence[str], error: type[Exception]) -> list[str]:
    """Delete the recorded namespaces that still exist, newest first; returns the failures."""
    problems: list[str] = []
    for name in reversed(created):
        if os.path.exists(netns_path(name)):
            try:
                run_ip(["netns", "del", name], error)
            except error as exc:
                problems.append(str(exc))
    return problems


def cmdline(pid: int) -> bytes:
    """The process's NUL-separated command line; empty when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
