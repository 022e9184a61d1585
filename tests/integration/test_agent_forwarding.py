"""The agent turns the node's forwarding on, and where /proc/sys is read-only (a container
that is not privileged, as the manifest's agent) it says so and goes on instead of dying.

The agent's own step runs in a private node namespace, once with /proc/sys writable and once
under a read-only bind mount of it in a private mount namespace (what runc gives such a
container); the value the kernel holds is read from outside.
"""

from __future__ import annotations

import sys

from tests import harness

STEP = """
import sys, types
from pycni.cluster.agent import Agent
lines = []
Agent._enable_forwarding(types.SimpleNamespace(log=lines.append), 4)
print("\\n".join(lines))
"""


def _forwarding(ns: harness.Namespace) -> str:
    return ns.run("cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip()


def _agent_step(ns: harness.Namespace, read_only: bool) -> str:
    mount = "mount --bind -o ro /proc/sys /proc/sys && " if read_only else ""
    script = f'{mount}exec "$0" -c "$1"'
    proc = ns.run("unshare", "-m", "--propagation", "private", "sh", "-c", script,
                  sys.executable, STEP)  # fmt: skip
    return proc.stdout


def test_forwarding_is_turned_on(node: harness.Namespace) -> None:
    node.run("sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward")
    assert _agent_step(node, read_only=False).strip() == ""
    assert _forwarding(node) == "1"
    assert _agent_step(node, read_only=True).strip() == ""  # already on: nothing written


def test_read_only_proc_sys_is_a_warning_not_a_crash(node: harness.Namespace) -> None:
    node.run("sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward")
    said = _agent_step(node, read_only=True)
    assert "warning: net.ipv4.ip_forward is off and cannot be set from here" in said
    assert "Read-only file system" in said and "sysctl -w" in said
    assert _forwarding(node) == "0"
