"""GC forwarded to IPAM by macvlan, host-device and tap, against the real kernel.

The spec says a plugin MUST pass GC on to its delegates; v1.9.1's three leave it as a FIXME, so
their IPAM keeps a dead attachment's address for ever. Here a pod that is gone (its namespace
deleted, its link with it) leaves a host-local reservation; GC with the live pod alone in
``cni.dev/valid-attachments`` frees it and keeps the live pod's. The store before GC is the one
v1.9.1 leaves; v1.9.1 frees nothing (neither its plugins nor its host-local implement GC), a
deliberate difference that docs/plugins/<name>.md list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pycni.net.nsscan import live_addresses
from tests import harness

pytestmark = pytest.mark.kernel

SUBNET = "10.212.77.0/24"  # rare: host-local GC looks for live addresses in every namespace
NETWORK = "gcfwd"


def _conf(kind: str, state: harness.State, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": NETWORK,
        "type": kind,
        "ipam": {"type": "host-local", "subnet": SUBNET, "dataDir": str(state.data_dir)},
        **extra,
    }


def _macvlan(node: harness.Namespace, state: harness.State, n: int) -> dict[str, Any]:
    if "gcm0" not in node.links():
        node.run("ip", "link", "add", "gcm0", "type", "veth", "peer", "name", "gcm1")
        node.run("ip", "link", "set", "gcm0", "up")
    return _conf("macvlan", state, master="gcm0")


def _host_device(node: harness.Namespace, state: harness.State, n: int) -> dict[str, Any]:
    node.run("ip", "link", "add", f"gch{n}", "type", "veth", "peer", "name", f"gcp{n}")
    return _conf("host-device", state, device=f"gch{n}", dataDir=str(state.root / "hostdev"))


def _tap(node: harness.Namespace, state: harness.State, n: int) -> dict[str, Any]:
    return _conf("tap", state)


SETUPS: dict[str, Callable[[harness.Namespace, harness.State, int], dict[str, Any]]] = {
    "macvlan": _macvlan,
    "host-device": _host_device,
    "tap": _tap,
}


def _run(
    plugin_dir: Path, kind: str, command: str, conf: dict[str, Any], cid: str, netns: str
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin_dir / kind,
        command,
        conf,
        container_id=cid,
        netns=netns,
        ifname="eth0" if netns else "",
        cni_path=str(plugin_dir),
    )


def _gc_after_a_pod_died(
    plugin_dir: Path,
    kind: str,
    node: harness.Namespace,
    pod_factory: Any,
    state: harness.State,
    gc: Callable[[dict[str, Any]], harness.PluginRun],
) -> tuple[list[str], list[str], dict[str, Any]]:
    """ADD "keep" and "gone"; "gone"'s namespace is deleted; then ``gc``. (reservations
    before GC, after GC, keep's config)."""
    keep, gone = pod_factory(), pod_factory()
    confs = {}
    gone_ip = ""
    with node.entered():
        for n, (cid, pod) in enumerate((("keep", keep), ("gone", gone))):
            confs[cid] = SETUPS[kind](node, state, n)
            result = _run(plugin_dir, kind, "ADD", confs[cid], cid, pod.path).ok().json
            gone_ip = result["ips"][0]["address"].split("/")[0]
    gone.delete()  # the runtime lost it: no DEL ever comes
    # The kernel frees a deleted namespace a little later (its sockets' deferred free, and for
    # host-device the device's way back), and a GC in that window rightly keeps the address
    # (through the daemon the verb answers in ms): wait until GC's own scan no longer sees it.
    deadline = time.monotonic() + 30
    with node.entered():
        while gone_ip in live_addresses().addresses:
            assert time.monotonic() < deadline, f"{gone_ip} still in a live namespace"
            time.sleep(0.05)
    before = state.reservations(NETWORK)
    valid = [{"containerID": "keep", "ifname": "eth0"}]
    with node.entered():
        gc({**confs["keep"], "cni.dev/valid-attachments": valid}).ok()
    after = state.reservations(NETWORK)
    with node.entered():
        _run(plugin_dir, kind, "DEL", confs["keep"], "keep", keep.path).ok()
    return before, after, confs["keep"]


@pytest.mark.parametrize("kind", sorted(SETUPS))
def test_gc_frees_the_dead_pods_address_and_keeps_the_live_one(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    tmp_state: harness.State,
    kind: str,
) -> None:
    def gc(conf: dict[str, Any]) -> harness.PluginRun:
        return _run(plugin_dir, kind, "GC", conf, "", "")

    before, after, _ = _gc_after_a_pod_died(plugin_dir, kind, node, pod_factory, tmp_state, gc)
    assert before == ["10.212.77.2", "10.212.77.3"]
    assert after == ["10.212.77.2"]  # keep's; gone's went back to the pool
    assert tmp_state.reservations(NETWORK) == []


@pytest.mark.interop
@pytest.mark.parametrize("kind", sorted(SETUPS))
def test_same_store_as_v1_9_1_before_gc_and_v1_9_1_frees_nothing(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    tmp_path: Path,
    upstream_reference: Any,
    kind: str,
) -> None:
    """The two ADDs leave the store v1.9.1 leaves; v1.9.1's GC, from the plugin or from its
    host-local by hand (neither has one: skel answers success), frees nothing of it."""
    ref = upstream_reference.plugin_dir
    outcomes = {}
    for n, (way, directory, gc_of) in enumerate(
        (
            ("pycni", plugin_dir, kind),
            ("v1.9.1 plugin", ref, kind),
            ("v1.9.1 host-local", ref, "host-local"),
        )
    ):
        state = harness.State.make(tmp_path / f"state{n}")
        test_node = harness.create_namespace("node")

        def gc(conf: dict[str, Any], directory: Path = directory, gc_of: str = gc_of) -> Any:
            return _run(directory, gc_of, "GC", conf, "", "")

        try:
            outcomes[way] = _gc_after_a_pod_died(
                directory, kind, test_node, pod_factory, state, gc
            )[:2]
        finally:
            test_node.delete()
    both = ["10.212.77.2", "10.212.77.3"]
    assert outcomes["pycni"] == (both, ["10.212.77.2"]), (upstream_reference.label, outcomes)
    assert outcomes["v1.9.1 plugin"] == outcomes["v1.9.1 host-local"] == (both, both), outcomes
