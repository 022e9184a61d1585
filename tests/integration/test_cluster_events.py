"""Between full passes the agents apply each lease change alone (the per-event path): with
the reconcile interval set far beyond the test, only watch events can change anything.

On a 2-node vxlan cluster, node2's lease is rewritten by hand (a new VTEP MAC and
underlay address, as after its device was recreated and the node renumbered): node1's
neighbor and FDB entries follow, the old FDB entry goes, the route stays; the original
comes back the same way. A hostile copy is ignored and the previous state kept out of
the data path; the end of node2's etcd lease removes its route, neighbor and FDB entry.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycni.cluster.lease import LeaseStore
from pycni.playground import cluster
from tests import harness
from tests.integration.cluster_helpers import wait_for

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("PYCNI_TEST_MODE") == "daemon", reason="same test as in-process"
    ),
]

PYCNI = str(Path(sys.executable).parent / "pycni")
NEW_MAC = "02:aa:bb:cc:dd:01"
NEW_ADDRESS = "10.99.0.250"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterState]:
    root = tmp_path_factory.mktemp("cluster-events") / "state"
    proc = subprocess.run(
        [PYCNI, "cluster", "--state-dir", str(root), "up", "--nodes", "2",
         "--pods-per-node", "0", "--backend", "vxlan", "--prefix", f"{harness.RUN_PREFIX}ev-",
         "--reconcile-interval", "600"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield cluster.ClusterState.load(str(root))
    finally:
        subprocess.run(
            [PYCNI, "cluster", "--state-dir", str(root), "down"],
            capture_output=True,
            timeout=120,
            check=False,
        )


def _neigh(node: harness.Namespace) -> str:
    return node.run("ip", "neigh", "show", "dev", "pycni.1").stdout


def _fdb(node: harness.Namespace) -> str:
    return node.run("bridge", "fdb", "show", "dev", "pycni.1").stdout


def test_lease_changes_reach_the_data_path_by_events_alone(
    state: cluster.ClusterState,
) -> None:
    node1, node2 = state.nodes
    ns1 = harness.Namespace(node1.name)
    subnet2 = node2.subnet()
    gateway2 = subnet2.split("/")[0]
    etcd = state.etcd()
    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    key = store.key(ipaddress.ip_network(subnet2))
    original = etcd.get(key)
    assert original is not None
    value = json.loads(original.value)
    old_mac = value["BackendData"]["VtepMAC"]
    assert f"{gateway2} lladdr {old_mac}" in _neigh(ns1)
    assert f"{old_mac} dst {node2.address} " in _fdb(ns1)
    # node2's agent would write its own value back at its next renewal (its etcd lease,
    # TTL 60 s, outlives the test): the rewrites below are made through that lease, as its
    # renewals would make them
    cluster.stop_agent(state, node2)

    moved = {**value, "PublicIP": NEW_ADDRESS, "BackendData": {"VNI": 1, "VtepMAC": NEW_MAC}}
    etcd.put(key, json.dumps(moved), original.lease)
    wait_for(lambda: f"{gateway2} lladdr {NEW_MAC}" in _neigh(ns1), 20.0, "the new neighbor entry")
    wait_for(lambda: f"{NEW_MAC} dst {NEW_ADDRESS} " in _fdb(ns1), 20.0, "the new FDB entry")
    assert old_mac not in _fdb(ns1)
    assert subnet2 in cluster.node_routes(node1)

    hostile = {**value, "BackendData": {"VNI": 1, "VtepMAC": "ff:ff:ff:ff:ff:ff"}}
    etcd.put(key, json.dumps(hostile), original.lease)
    wait_for(
        lambda: subnet2 not in cluster.node_routes(node1), 20.0, "the hostile lease's route to go"
    )
    assert gateway2 not in _neigh(ns1) and NEW_MAC not in _fdb(ns1)
    log = Path(node1.agent_log).read_text()
    assert "is a multicast/broadcast address" in log

    etcd.put(key, original.value, original.lease)
    wait_for(lambda: subnet2 in cluster.node_routes(node1), 20.0, "the route back")
    wait_for(lambda: f"{gateway2} lladdr {old_mac}" in _neigh(ns1), 20.0, "the old neighbor back")
    assert f"{old_mac} dst {node2.address} " in _fdb(ns1)

    etcd.revoke(original.lease)  # as when its lease expires: the key goes with it
    wait_for(lambda: subnet2 not in cluster.node_routes(node1), 20.0, "the route to go")
    assert gateway2 not in _neigh(ns1) and old_mac not in _fdb(ns1)


def test_an_event_is_checked_against_routes_added_since_the_last_full_pass(
    state: cluster.ClusterState,
) -> None:
    """An administrator routes a prefix by hand; a lease for it arriving by a watch event is
    refused (the agent saw the route appear), not half-programmed around it."""
    node1 = state.nodes[0]
    ns1 = harness.Namespace(node1.name)
    taken = "10.244.200.0/24"
    ns1.run("ip", "route", "add", taken, "via", str(state.underlay_gateway.ip))
    etcd = state.etcd()
    key = LeaseStore(etcd, cluster.ETCD_PREFIX).key(ipaddress.ip_network(taken))
    lease = {
        "PublicIP": "10.99.0.77",
        "BackendType": "vxlan",
        "BackendData": {"VNI": 1, "VtepMAC": "02:aa:bb:cc:dd:77"},
    }
    try:
        etcd.put(key, json.dumps(lease))
        wait_for(
            lambda: (
                f"{taken} via {state.underlay_gateway.ip}" in Path(node1.agent_log).read_text()
                and "10.244.200.0-24: overlaps the route" in Path(node1.agent_log).read_text()
            ),
            20.0,
            "the lease to be refused",
        )
        assert "10.244.200.0 " not in _neigh(ns1)
        assert "02:aa:bb:cc:dd:77" not in _fdb(ns1)
        assert taken not in cluster.node_routes(node1)  # still the administrator's
        assert "via" in ns1.run("ip", "route", "show", taken).stdout
    finally:
        etcd.delete(key)
        ns1.run("ip", "route", "del", taken, check=False)
