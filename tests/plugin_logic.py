"""Helpers of the plugin-logic unit tests: run a plugin through skel on a FakeHost.

No root and no namespaces: the plugin's kernels are FakeKernels (pycni.net.netlink.fake_kernel,
held to the real kernel by tests/kernel_contract.py), its sysctls FakeSysctls, its state files
a FakeStateFiles and its child processes a FakeProcesses (held to the disk and the machine's
processes by tests/state_contract.py and tests/unit/test_process_contract.py), its IPAM runs
in-process on the same host. ``picture`` is what a test compares: every namespace's links,
addresses, routes, rules, sysctls and tc objects, by name (no indexes, no random MACs), and
its fake netfilter (FakeNftables' ruleset).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pycni.net.netlink.fake_kernel import IPV4_CONF_IDS, IPV6_CONF_DEFAULTS, FakeKernel
from pycni.net.netlink.kernel import AF_INET, AF_INET6, Route
from pycni.skel import run as skel
from pycni.skel.base import Plugin
from pycni.skel.fake_host import FakeHost
from pycni.skel.rollback import FAIL_AT_ENV, Rollback
from tests.kernel_contract import addresses, links, routes, rules

POD = "/run/netns/fakepod"


# A pod whose interface another plugin made: what the chained plugins (sbr, tuning, vrf) are
# handed as prevResult, and the pod it names (a dummy eth0 with an address and two routes).
CHAINED_PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": POD}],
    "ips": [{"address": "10.55.0.5/24", "gateway": "10.55.0.1", "interface": 0}],
}


def pod_with_eth0() -> FakeHost:
    """A FakeHost with one pod holding the interface CHAINED_PREV names."""
    host = FakeHost()
    host.add_pod(POD)
    pod = host.kernel(POD)
    pod.add_dummy("eth0")
    eth0 = pod.find_link("eth0")
    assert eth0 is not None
    pod.set_link(eth0.index, up=True)
    pod.add_address(eth0.index, ipaddress.ip_interface("10.55.0.5/24"))
    net, ip = ipaddress.ip_network, ipaddress.ip_address
    pod.add_route(Route(net("0.0.0.0/0"), oif=eth0.index, gateway=ip("10.55.0.1")))
    pod.add_route(Route(net("172.16.0.0/12"), oif=eth0.index, gateway=ip("10.55.0.254")))
    return host


CONTAINER_ID = "fakecontainer1"


def env(command: str, pod: str = POD, ifname: str = "eth0", **extra: str) -> dict[str, str]:
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": CONTAINER_ID,
        "CNI_NETNS": pod,
        "CNI_IFNAME": ifname,
        "CNI_PATH": "/nonexistent",  # a delegate never comes from here: the fake runs it
        **extra,
    }


def call(
    host: FakeHost,
    plugin_type: str | Plugin,
    command: str,
    config: dict[str, Any],
    pod: str = POD,
    ifname: str = "eth0",
    fail_at: str = "",
    extra_env: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """(exit code, the parsed stdout or None when empty) of one call through skel; the plugin
    by its registered type, or an instance (a plugin built with a test's seam, e.g. tap's)."""
    extra = {**(extra_env or {}), **({FAIL_AT_ENV: fail_at} if fail_at else {})}
    stdin = json.dumps(config).encode()
    environ = env(command, pod, ifname, **extra)
    if isinstance(plugin_type, Plugin):
        outcome = skel.run_plugin(plugin_type, environ, stdin, host=host)
    else:
        outcome = skel.run(plugin_type, environ, stdin, host=host)
    assert host.open_kernels == 0, "a Kernel handed out was not closed"
    return outcome.exit_code, json.loads(outcome.stdout) if outcome.stdout else None


def ok(
    host: FakeHost, plugin_type: str | Plugin, command: str, config: dict[str, Any], **kw: Any
) -> Any:
    code, reply = call(host, plugin_type, command, config, **kw)
    assert code == 0, reply
    return reply


def failed(
    host: FakeHost, plugin_type: str | Plugin, command: str, config: dict[str, Any], **kw: Any
) -> str:
    """The error message of a call that must fail."""
    code, reply = call(host, plugin_type, command, config, **kw)
    assert code == 1, reply
    return str(reply["msg"])


def with_prev(config: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {**config, "prevResult": result}


def _namespace(k: FakeKernel) -> dict[str, Any]:
    names = {x.index: x.name for x in k.links()}
    conf = {}
    for name in names.values():
        # the values, not which were written: a write of the default changes nothing
        v4 = [(knob, k.ns.sysctl.read(f"net/ipv4/conf/{name}/{knob}")) for knob in IPV4_CONF_IDS]
        v6 = [
            (knob, k.ns.sysctl.read(f"net/ipv6/conf/{name}/{knob}")) for knob in IPV6_CONF_DEFAULTS
        ]
        conf[name] = (sorted(v4), sorted(v6))
    return {
        "links": links(k),
        "addresses": addresses(k),
        "routes4": routes(k, AF_INET, 0),
        "routes6": routes(k, AF_INET6, 0),
        "rules": (rules(k, AF_INET), rules(k, AF_INET6)),
        "forwarding": dict(k.ns.forwarding),
        "conf": conf,
        "neighbours": sorted((names[i], str(a), m) for (i, a), m in k.ns.neighbours.items()),
        "qdiscs": sorted((names[i], q.kind, q.parent) for i, qs in k.ns.qdiscs.items() for q in qs),
        "vlans": sorted((x.name, tuple(x.vlans)) for x in k.ns.links.values() if x.vlans),
        "ports": sorted((x.name, x.hairpin, x.isolated) for x in k.ns.links.values() if x.master),
    }


def _netfilter(host: FakeHost, k: FakeKernel) -> dict[str, Any]:
    """The namespace's fake netfilter, each part that holds something by its ``picture()``
    (FakeNftables: the ruleset as ``nft -j list ruleset``); nothing before a plugin asked."""
    nf = host.netfilters.get(k.ns.fd)
    if nf is None:
        return {}
    parts = (("nft", nf.nft), ("iptables", nf.iptables), ("conntrack", nf.conntrack))
    shown = {name: part.picture() for name, part in parts if hasattr(part, "picture")}
    return {name: view for name, view in shown.items() if view}


def picture(host: FakeHost) -> dict[str, Any]:
    """Every namespace of the host (its fake netfilter too), normalized for comparison, and the
    node's state files (FakeStateFiles: bytes and mode of each file) and live processes."""
    node = host.kernel()
    out: dict[str, Any] = {"node": {**_namespace(node), "netfilter": _netfilter(host, node)}}
    for path in sorted(host.pods):
        pod = host.kernel(path)
        out[path] = {**_namespace(pod), "netfilter": _netfilter(host, pod)}
    out["files"] = host.files.tree()  # directories a plugin made may stay, as the reference's
    out["processes"] = sorted(
        argv for pid, argv in host.children.procs.items() if host.children.alive(pid)
    )
    return out


@contextmanager
def recording_steps() -> Iterator[list[str]]:
    """The Rollback steps the calls in the block pass, in order, each once."""
    steps: list[str] = []
    original = Rollback.step

    def step(self: Rollback, name: str) -> None:
        if name not in steps:
            steps.append(name)
        original(self, name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Rollback, "step", step)
        yield steps


def assert_each_step_rolls_back(
    host: FakeHost, plugin_type: str | Plugin, config: dict[str, Any], minimum: int = 2
) -> list[str]:
    """ADD with a failure injected at each of its steps leaves the host as it was."""
    with recording_steps() as steps:
        ok(host, plugin_type, "ADD", config)
    ok(host, plugin_type, "DEL", config)
    assert len(steps) >= minimum, steps
    before = picture(host)
    for step in steps:
        code, reply = call(host, plugin_type, "ADD", config, fail_at=step)
        assert code == 1, reply
        assert f"injected failure at step {step!r}" in reply["msg"], reply
        assert "rollback incomplete" not in str(reply.get("details", "")), reply
        assert picture(host) == before, step
    return steps


def kernels(view: dict[str, Any]) -> dict[str, Any]:
    """A picture's namespaces' links, addresses and routes only: without its state files,
    processes and netfilter (what a plugin that keeps state or opens a port leaves alone)."""
    return {
        k: {part: seen for part, seen in v.items() if part != "netfilter"}
        for k, v in view.items()
        if k not in ("files", "processes")
    }
