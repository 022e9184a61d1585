"""Helpers of the iptables logic tests: the FakeHost's iptables and conntrack, and pictures
that include them.

Each namespace of a FakeHost has a FakeIptables and a FakeConntrack
(pycni.net.netfilter.fake_iptables, held to the real tools by tests/netfilter/
iptables_contract.py), made on first use. ``whole_picture`` adds their state to
tests/plugin_logic.picture, so a rollback test sees a rule or an entry left behind as surely
as a link.
"""

from __future__ import annotations

import ipaddress
from typing import Any, cast

from pycni.net.netfilter.fake_iptables import FakeConntrack, FakeIptables
from pycni.skel.base import Plugin
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import call, ok, picture, recording_steps


def iptables_of(host: FakeHost, path: str = "") -> FakeIptables:
    """The FakeIptables of the pod ``path`` (the node without one)."""
    return cast(FakeIptables, host.netfilter(host.kernel(path)).iptables)


def conntrack_of(host: FakeHost, path: str = "") -> FakeConntrack:
    return cast(FakeConntrack, host.netfilter(host.kernel(path)).conntrack)


def netfilter_picture(host: FakeHost) -> dict[str, Any]:
    """Every namespace's iptables tables (user chains and chains with rules) and conntrack
    entries."""
    out: dict[str, Any] = {}
    for path in ["", *sorted(host.pods)]:
        ct = conntrack_of(host, path).picture()
        out[path or "node"] = {"iptables": iptables_of(host, path).picture(), "conntrack": ct}
    return out


def whole_picture(host: FakeHost) -> dict[str, Any]:
    return {"kernel": picture(host), "netfilter": netfilter_picture(host)}


def assert_each_step_rolls_back(
    host: FakeHost, plugin_type: str | Plugin, config: dict[str, Any], minimum: int = 2
) -> list[str]:
    """ADD with a failure injected at each of its steps leaves the host as it was, its
    iptables tables and conntrack table included (tests/plugin_logic.py's, netfilter too)."""
    with recording_steps() as steps:
        ok(host, plugin_type, "ADD", config)
    ok(host, plugin_type, "DEL", config)
    assert len(steps) >= minimum, steps
    before = whole_picture(host)
    for step in steps:
        code, reply = call(host, plugin_type, "ADD", config, fail_at=step)
        assert code == 1, reply
        assert f"injected failure at step {step!r}" in reply["msg"], reply
        assert "rollback incomplete" not in str(reply.get("details", "")), reply
        assert whole_picture(host) == before, step
    return steps


def masquerade_rules(network: str, cid: str, address: str) -> dict[str, list[str]]:
    """The reference's ipMasq chain for one address (``10.22.0.5/24``), as iptables-save
    prints it: accept the pod's subnet, masquerade the rest but multicast, entered from
    POSTROUTING by the pod's address."""
    from pycni.net.netfilter.ipmasq import chain_name, iptables_comment
    from pycni.net.netfilter.iptables_script import quote

    ipn = ipaddress.ip_interface(address)
    chain = chain_name(network, cid)
    comment = f"-m comment --comment {quote(iptables_comment(network, cid))}"
    multicast = "224.0.0.0/4" if ipn.version == 4 else "ff00::/8"
    host = f"{ipn.ip}/{ipn.max_prefixlen}"
    return {
        chain: [
            f"-A {chain} -d {ipn.network} {comment} -j ACCEPT",
            f"-A {chain} ! -d {multicast} {comment} -j MASQUERADE",
        ],
        "POSTROUTING": [f"-A POSTROUTING -s {host} {comment} -j {chain}"],
    }
