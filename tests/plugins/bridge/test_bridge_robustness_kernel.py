# ruff: noqa: F811  (pytest fixtures imported from tests/plugins/bridge/support.py)
"""bridge: rollback of every ADD step, DEL idempotence, bad configs, the version matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import harness
from tests.plugins.bridge.support import (  # noqa: F401
    bridge_dir,
    conf,
    host_veths,
    masq_rules,
    nft_chains,
    run,
)

pytestmark = pytest.mark.kernel

ADD_STEPS = [
    "bridge",
    "veth",
    "port",
    "macspoofchk",
    "ipam",
    "post-ipam",
    "container-config",
    "gateway",
    "forwarding",
    "ipmasq",
    "port-up",
    "done",
]


def _full(state: harness.State) -> dict[str, Any]:
    return conf(
        state,
        subnets=("10.77.0.0/24", "fd77::/64"),
        isDefaultGateway=True,
        ipMasq=True,
        macspoofchk=True,
    )


@pytest.mark.parametrize("step", ADD_STEPS)
def test_failure_at_each_add_step_leaves_nothing(
    step: str,
    bridge_dir: Path,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
) -> None:
    pod = pod_factory()
    c = _full(tmp_state)
    r = run(bridge_dir, node, "ADD", c, pod, extra_env={"PYCNI_TEST_FAIL_AT": step})
    assert r.code == 1, r.stdout
    assert r.json["code"] == 999
    assert "injected failure" in str(r.json["msg"])
    assert "eth0" not in pod.links()
    assert host_veths(node) == []
    assert "cnibr0" not in node.links()  # the bridge we created (and nothing uses) is gone
    assert masq_rules(node) == []
    assert not [ch for ch in nft_chains(node, "bridge", "nat") if ch.startswith("cni-br")]
    assert tmp_state.reservations("brnet") == []
    # and a normal ADD works afterwards
    run(bridge_dir, node, "ADD", c, pod).ok()
    run(bridge_dir, node, "DEL", c, pod).ok()


def test_failure_keeps_a_preexisting_bridge_and_its_addresses(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = _full(tmp_state)
    first = pod_factory()
    run(bridge_dir, node, "ADD", c, first, cid="first").ok()
    before = sorted(node.addresses("cnibr0"))
    pod = pod_factory()
    r = run(bridge_dir, node, "ADD", c, pod, extra_env={"PYCNI_TEST_FAIL_AT": "done"})
    assert r.code == 1
    assert sorted(node.addresses("cnibr0")) == before
    assert len(host_veths(node)) == 1
    assert len(masq_rules(node)) == 2  # the first pod's v4 and v6 rules
    run(bridge_dir, node, "DEL", c, first, cid="first").ok()


def test_del_is_idempotent_in_every_situation(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = _full(tmp_state)
    # twice in a row
    pod = pod_factory()
    run(bridge_dir, node, "ADD", c, pod).ok()
    run(bridge_dir, node, "DEL", c, pod).ok()
    run(bridge_dir, node, "DEL", c, pod).ok()
    assert tmp_state.reservations("brnet") == []
    assert masq_rules(node) == []
    # without CNI_NETNS: releases the reservation (the veth goes with the namespace)
    pod2 = pod_factory()
    run(bridge_dir, node, "ADD", c, pod2, cid="p2").ok()
    run(bridge_dir, node, "DEL", c, None, cid="p2", netns="").ok()
    assert tmp_state.reservations("brnet") == []
    pod2.delete()
    # after the namespace was deleted: reservation, masquerade and spoof-check rules go too
    pod3 = pod_factory()
    run(bridge_dir, node, "ADD", c, pod3, cid="p3").ok()
    path = pod3.path
    pod3.delete()
    run(bridge_dir, node, "DEL", c, None, cid="p3", netns=path).ok()
    assert tmp_state.reservations("brnet") == []
    assert masq_rules(node) == []
    assert not [ch for ch in nft_chains(node, "bridge", "nat") if ch.startswith("cni-br")]
    # after the interface was removed by hand
    pod4 = pod_factory()
    run(bridge_dir, node, "ADD", c, pod4, cid="p4").ok()
    pod4.run("ip", "link", "del", "eth0")
    run(bridge_dir, node, "DEL", c, pod4, cid="p4").ok()
    assert tmp_state.reservations("brnet") == []
    assert masq_rules(node) == []
    assert host_veths(node) == []


def _state(node: harness.Namespace, pod: harness.Namespace) -> tuple[Any, ...]:
    return (sorted(node.links()), sorted(pod.links()), masq_rules(node))


@pytest.mark.parametrize(
    ("extra", "code", "words"),
    [
        ({"hairpinMode": True, "promiscMode": True}, 7, "hairpin mode and promiscuous"),
        ({"disableContainerInterface": True}, 7, "DisableContainerInterface"),
        ({"vlan": 5000}, 7, "invalid VLAN ID 5000"),
        ({"vlan": -1}, 7, "invalid VLAN ID -1"),
        ({"vlanTrunk": [{"minID": 10}]}, 7, "maxID is missing"),
        ({"vlanTrunk": [{"maxID": 10}]}, 7, "minID is missing"),
        ({"vlanTrunk": [{"minID": 20, "maxID": 10}]}, 7, "minID is greater than maxID"),
        ({"vlanTrunk": [{"id": 0}]}, 7, "incorrect trunk id"),
        ({"vlan": 3, "vlanTrunk": [{"id": 4}]}, 2, "VLAN filtering"),
        ({"vlan": 3, "isGateway": True, "bridge": "b" * 14}, 7, "exceed 15 bytes"),
        ({"vlan": 100}, 2, "VLAN filtering"),
        ({"vlanTrunk": [{"id": 7}]}, 2, "VLAN filtering"),
        ({"ipMasqBackend": "pf"}, 7, "unknown ipmasq backend"),
        ({"mtu": "big"}, 7, "mtu"),
        ({"runtimeConfig": {"mac": "zz"}}, 7, "invalid MAC"),
    ],
)
def test_bad_configs_give_cni_errors_and_change_nothing(
    extra: dict[str, Any],
    code: int,
    words: str,
    bridge_dir: Path,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
) -> None:
    pod = pod_factory()
    before = _state(node, pod)
    r = run(bridge_dir, node, "ADD", conf(tmp_state, **extra), pod)
    assert r.code == 1
    assert r.json["code"] == code, r.stdout
    assert words in str(r.json["msg"])
    assert _state(node, pod) == before
    assert tmp_state.reservations("brnet") == []


def test_ifname_already_in_pod(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    pod = pod_factory()
    pod.run("ip", "link", "add", "name", "eth0", "type", "veth", "peer", "name", "other0")
    before = _state(node, pod)
    r = run(bridge_dir, node, "ADD", conf(tmp_state), pod)
    assert r.code == 1
    assert "already exists" in str(r.json["msg"])
    assert _state(node, pod) == before
    assert tmp_state.reservations("brnet") == []


def test_bridge_name_of_a_non_bridge_link(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    node.run("ip", "link", "add", "name", "cnibr0", "type", "veth", "peer", "name", "x0")
    pod = pod_factory()
    before = _state(node, pod)
    r = run(bridge_dir, node, "ADD", conf(tmp_state), pod)
    assert r.code == 1
    assert r.json["code"] == 7
    assert "already exists but is not a bridge" in str(r.json["msg"])
    assert _state(node, pod) == before


def test_gateway_conflict_and_force_address(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    node.run("ip", "link", "add", "name", "cnibr0", "type", "bridge")
    node.run("ip", "addr", "add", "10.66.0.1/24", "dev", "cnibr0")
    pod = pod_factory()
    r = run(bridge_dir, node, "ADD", conf(tmp_state, isGateway=True), pod)
    assert r.code == 1
    assert "already has an IP address different from 10.77.0.1/24" in str(r.json["msg"])
    assert host_veths(node) == []
    assert tmp_state.reservations("brnet") == []
    run(bridge_dir, node, "ADD", conf(tmp_state, isGateway=True, forceAddress=True), pod).ok()
    assert node.addresses("cnibr0")[0] == "10.77.0.1/24"
    run(bridge_dir, node, "DEL", conf(tmp_state, isGateway=True), pod).ok()


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_version_matrix_add_check_del(
    version: str,
    bridge_dir: Path,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_state: harness.State,
) -> None:
    c = conf(tmp_state, version=version, isDefaultGateway=True)
    pod = pod_factory()
    r = run(bridge_dir, node, "ADD", c, pod).ok().json
    assert r["cniVersion"] == version
    assert len(r["interfaces"]) == 3
    ip = r["ips"][0]
    assert ip["address"] == "10.77.0.2/24"
    assert ip["interface"] == 2
    if version in ("0.3.1", "0.4.0"):
        assert ip["version"] == "4"
    else:
        assert "version" not in ip
    if version != "0.3.1":
        chk = dict(c, prevResult=r)
        run(bridge_dir, node, "CHECK", chk, pod).ok()
        pod.run("ip", "route", "del", "default")
        bad = run(bridge_dir, node, "CHECK", chk, pod)
        assert bad.code == 1
        assert "Failed to match route 0.0.0.0/0" in str(bad.json["msg"])
    run(bridge_dir, node, "DEL", c, pod).ok()
    assert tmp_state.reservations("brnet") == []


def test_gc_and_status_on_1_1_0(
    bridge_dir: Path, node: harness.Namespace, pod_factory: Any, tmp_state: harness.State
) -> None:
    c = conf(tmp_state, version="1.1.0", isDefaultGateway=True, ipMasq=True)
    keep, drop = pod_factory(), pod_factory()
    run(bridge_dir, node, "ADD", c, keep, cid="keep").ok()
    run(bridge_dir, node, "ADD", c, drop, cid="drop").ok()
    assert len(masq_rules(node)) == 2
    run(bridge_dir, node, "STATUS", c, None, cid="", ifname="").ok()
    gc = dict(c, **{"cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "eth0"}]})
    run(bridge_dir, node, "GC", gc, None, cid="", ifname="").ok()
    rules = masq_rules(node)
    assert len(rules) == 1
    assert rules[0].endswith("id: keep")
    run(bridge_dir, node, "DEL", c, keep, cid="keep").ok()
    run(bridge_dir, node, "DEL", c, drop, cid="drop").ok()
    assert masq_rules(node) == []
