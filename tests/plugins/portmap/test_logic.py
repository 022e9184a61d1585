"""portmap's verbs (plugins/meta/portmap/plugin.py) on the fake host: no root, no netns.

What the backends send to nftables and iptables is proven by the goldens of test_nft_model.py;
this module proves what the plugin around them does: which device gets route_localnet (the
node's route to the pod, on the fake host's node Kernel and FakeSysctl), when the conntrack
flush runs, that nothing is written before the lookups that can fail, that a failed ADD runs
the backend's removal, that DEL and GC also clear nftables state when iptables is chosen, and
STATUS. The node's netfilter is tests/unit/nft_transport.py's Recorder (stateless: reads
answer "nothing there"), its conntrack a recorder of the flushes. The stateful rollback tests on
FakeNftables are test_logic_nft.py's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from pycni.net.netfilter.seam import Netfilter
from pycni.plugins.meta.portmap import reference_state
from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD, call, failed, ok, picture, recording_steps, with_prev
from tests.unit.nft_transport import Recorder

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": POD}],
    "ips": [
        {"address": "10.22.0.5/16", "gateway": "10.22.0.1", "interface": 1},
        {"address": "fd22::5/64", "gateway": "fd22::1", "interface": 1},
    ],
}
TCP = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
UDP = [{"hostPort": 8053, "containerPort": 53, "protocol": "udp"}]
LOCALNET = "net/ipv4/conf/cni0/route_localnet"


def conf(mappings: list[dict[str, Any]] | None = TCP, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap", **extra}
    if mappings is not None:
        config["runtimeConfig"] = {"portMappings": mappings}
    return with_prev(config, PREV)


def node_with_bridge(rec: Recorder, route: bool = True) -> FakeHost:
    """The node as bridge leaves it: cni0 up with the pod network's gateway addresses, and a
    second link whose route_localnet must stay as it is; its netfilter is ``rec``'s."""
    host = FakeHost()
    host.netfilters[host.node_ns.fd] = rec.nf
    host.add_pod(POD)
    node = host.kernel()
    node.add_bridge("cni0")
    node.add_dummy("other0")
    for name in ("cni0", "other0"):
        link = node.find_link(name)
        assert link is not None
        node.set_link(link.index, up=True)
    if route:
        cni0 = node.find_link("cni0")
        assert cni0 is not None
        node.add_address(cni0.index, ipaddress.ip_interface("10.22.0.1/16"))
    return host


class Flushes:
    """conntrack.delete_by_dst_port, recorded (and optionally refused)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], str, int]] = []
        self.error: Exception | None = None

    def __call__(self, ports: list[int], protocol: str, family: int) -> int:
        self.calls.append((list(ports), protocol, family))
        if self.error is not None:
            raise self.error
        return 0


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder


class AddressFlushes:
    """conntrack.delete_by_address (DEL), recorded (and optionally refused)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.error: Exception | None = None

    def __call__(self, address: bytes, protocol: str) -> int:
        self.calls.append((str(ipaddress.ip_address(address)), protocol))
        if self.error is not None:
            raise self.error
        return 0


class RecordedConntrack:
    """The Conntrack Protocol over the two recorders."""

    def __init__(self, ports: Flushes, addresses: AddressFlushes) -> None:
        self.ports, self.addresses = ports, addresses

    def delete_by_dst_port(self, ports: list[int], protocol: str, family: int) -> int:
        return self.ports(ports, protocol, family)

    def delete_by_address(self, address: bytes, protocol: str) -> int:
        return self.addresses(address, protocol)


_ADDRESS_FLUSHES: list[AddressFlushes] = []


@pytest.fixture
def flushes(rec: Recorder) -> Flushes:
    """Both conntrack flushes recorded (the node's conntrack of ``rec``'s netfilter)."""
    recorded, by_address = Flushes(), AddressFlushes()
    rec.nf = Netfilter(rec.nf.nft, rec.nf.iptables, RecordedConntrack(recorded, by_address))
    _ADDRESS_FLUSHES[:] = [by_address]
    return recorded


def address_flushes() -> AddressFlushes:
    return _ADDRESS_FLUSHES[0]


def writes(rec: Recorder) -> list[str]:
    """The kinds of the writes recorded so far (reads left out)."""
    return [
        c[0]
        for c in rec.calls
        if c[0] in ("nft.text", "nft.json", "nftnl.batch", "iptables.restore")
    ]


def test_add_without_mappings_passes_prev_through_and_touches_nothing(
    rec: Recorder, flushes: Flushes
) -> None:
    host = node_with_bridge(rec, route=False)  # no route needed when there is nothing to map
    before = picture(host)
    assert ok(host, "portmap", "ADD", conf(None)) == PREV
    assert ok(host, "portmap", "ADD", conf([])) == PREV
    assert rec.calls == [] and flushes.calls == []
    assert picture(host) == before


def test_add_turns_route_localnet_on_the_device_that_routes_to_the_pod(
    rec: Recorder, flushes: Flushes
) -> None:
    host = node_with_bridge(rec)
    before = picture(host)
    assert ok(host, "portmap", "ADD", conf()) == PREV
    sysctl = host.kernel().ns.sysctl
    assert sysctl.read(LOCALNET) == "1"
    assert sysctl.read("net/ipv4/conf/other0/route_localnet") == "0"
    after = picture(host)
    assert after["node"]["links"] == before["node"]["links"]
    assert after[POD] == before[POD]
    assert writes(rec)  # the mappings went to nftables (what exactly: the goldens)
    assert flushes.calls == []  # TCP: no conntrack flush


def test_route_localnet_is_left_alone_without_snat_or_when_already_on(
    rec: Recorder, flushes: Flushes, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = node_with_bridge(rec)
    ok(host, "portmap", "ADD", conf(snat=False))
    sysctl = host.kernel().ns.sysctl
    assert sysctl.read(LOCALNET) == "0"
    sysctl.write(LOCALNET, "1")
    written: list[tuple[str, str]] = []
    original = type(sysctl).write

    def spy(self: Any, name: str, value: str) -> None:
        written.append((name, value))
        original(self, name, value)

    monkeypatch.setattr(type(sysctl), "write", spy)
    ok(host, "portmap", "ADD", conf())
    assert written == []  # read, found on, not written again (as before the seam)


def test_udp_mappings_flush_conntrack_per_family_and_a_failed_flush_is_only_logged(
    rec: Recorder, flushes: Flushes
) -> None:
    host = node_with_bridge(rec)
    ok(host, "portmap", "ADD", conf(UDP + TCP))
    assert flushes.calls == [([8053], "udp", 4), ([8053], "udp", 6)]
    flushes.error = OSError(1, "Operation not permitted")
    ok(host, "portmap", "ADD", conf(UDP))


def test_del_forgets_the_pods_udp_flows_and_a_failed_flush_is_only_logged(
    rec: Recorder, flushes: Flushes
) -> None:
    """upstream #1190: DEL drops the UDP conntrack entries of each of the pod's addresses;
    not when the mappings are known and none is UDP; without runtimeConfig it cannot know."""
    host = node_with_bridge(rec)
    ok(host, "portmap", "DEL", conf(UDP + TCP))
    assert address_flushes().calls == [("10.22.0.5", "udp"), ("fd22::5", "udp")]
    address_flushes().calls.clear()
    ok(host, "portmap", "DEL", conf(TCP))
    assert address_flushes().calls == []
    ok(host, "portmap", "DEL", conf(None))
    assert address_flushes().calls == [("10.22.0.5", "udp"), ("fd22::5", "udp")]
    address_flushes().error = OSError(1, "Operation not permitted")
    ok(host, "portmap", "DEL", conf(UDP))


def test_del_and_check_look_at_the_references_layouts(rec: Recorder, flushes: Flushes) -> None:
    """A pod v1.9.1 set up: DEL asks for its cni_hostport rules and, with the nftables backend
    selected, for the iptables scaffolding (over netlink: no iptables-save without it)."""
    host = node_with_bridge(rec)
    rec.calls.clear()
    ok(host, "portmap", "DEL", conf())
    asked = [c for c in rec.calls if c[0] in ("nftnl.chain_rules", "nftnl.chain_exists")]
    for family in ("ip", "ip6"):  # one GET each; no table, no rule dumps
        assert ["nftnl.chain_exists", family, "cni_hostport", "hostports"] in asked, asked
        assert ["nftnl.chain_exists", family, "nat", "CNI-HOSTPORT-DNAT"] in asked, asked
    assert not [c for c in asked if c[0] == "nftnl.chain_rules" and c[2] == "cni_hostport"]
    assert not [c for c in rec.calls if c[0].startswith("iptables")]
    # nothing of the reference's there either: CHECK still fails on the missing mapping
    assert "8080" in failed(host, "portmap", "CHECK", conf())


def test_no_route_to_the_pod_fails_before_anything_is_written(
    rec: Recorder, flushes: Flushes
) -> None:
    """The kernel refuses RTM_GETROUTE for an address no route covers (ENETUNREACH, as the
    contract's route cases hold the fake to), so that is the error, not the plugin's own
    "no route" wording (kept for an empty answer)."""
    host = node_with_bridge(rec, route=False)
    before = picture(host)
    assert failed(host, "portmap", "ADD", conf()) == "(101, 'Network is unreachable')"
    assert writes(rec) == []
    assert picture(host) == before


def test_a_failure_at_each_step_runs_the_backends_removal(rec: Recorder, flushes: Flushes) -> None:
    """After the injected failure the plugin makes the same calls a DEL of the attachment
    makes (the backend's removal), and route_localnet is as it was."""
    host = node_with_bridge(rec)
    rec.calls.clear()
    with pytest.MonkeyPatch.context() as patch:  # a DEL also looks at the reference's layouts
        patch.setattr(reference_state, "delete", lambda nf, cfg, skip_iptables: False)
        ok(host, "portmap", "DEL", conf())
    removal = list(rec.calls)
    assert removal  # the removal looks this attachment's state up
    with recording_steps() as steps:
        ok(host, "portmap", "ADD", conf(UDP))
    assert steps == ["nftables", "conntrack", "route_localnet"]
    for step in steps:
        host = node_with_bridge(rec)
        before = picture(host)
        rec.calls.clear()
        code, reply = call(host, "portmap", "ADD", conf(), fail_at=step)
        assert code == 1 and f"injected failure at step {step!r}" in reply["msg"], reply
        if step != "nftables":  # a failure at the first step comes before the install
            assert rec.calls[-len(removal) :] == removal, step
        assert picture(host) == before, step


def test_check_looks_only_when_mappings_are_given(rec: Recorder, flushes: Flushes) -> None:
    host = node_with_bridge(rec)
    ok(host, "portmap", "CHECK", conf(None))
    assert rec.calls == []
    # the recorder's nftables holds nothing: the mapping is missing
    assert "8080" in failed(host, "portmap", "CHECK", conf())


def test_del_and_gc_with_iptables_also_clear_nftables_state(
    rec: Recorder, flushes: Flushes
) -> None:
    host = node_with_bridge(rec)
    ok(host, "portmap", "DEL", conf(backend="iptables"))
    kinds = {c[0].split(".")[0] for c in rec.calls}
    assert {"iptables", "nftnl"} <= kinds, rec.calls
    rec.calls.clear()
    ok(host, "portmap", "DEL", conf())  # nftables alone: no iptables call
    assert not [c for c in rec.calls if c[0].startswith("iptables")]
    rec.calls.clear()
    gc = {**conf(None, backend="iptables"), "cniVersion": "1.1.0"}
    gc["cni.dev/valid-attachments"] = []
    del gc["prevResult"]
    ok(host, "portmap", "GC", gc)
    kinds = {c[0].split(".")[0] for c in rec.calls}
    assert "iptables" in kinds and kinds & {"nft", "nftnl"}, rec.calls


def test_status_reports_an_unusable_backend(
    rec: Recorder, flushes: Flushes, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = node_with_bridge(rec)
    status = {"cniVersion": "1.1.0", "name": "pmnet", "type": "portmap"}
    ok(host, "portmap", "STATUS", status)
    rec.nf.nft.usable = False
    code, reply = call(host, "portmap", "STATUS", status)
    assert (code, reply["code"]) == (1, 50), reply
    assert reply["msg"] == "portmap: the nftables backend is not usable here"
