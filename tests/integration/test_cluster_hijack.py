"""Lease writes cannot move a live node's pods (issue 24, item 2).

A 3-node vxlan cluster; node1 is the victim. Its agent is paused (SIGSTOP) while the test
keeps its etcd lease alive, so nothing restores its key behind the test's back. Then, as
anyone who can write the subnets prefix:

- its key is overwritten with another PublicIP (a plain put: the lease ID changes), then
  deleted and created again under the writer's own lease (the create revision changes);
- a lease for a free subnet reuses node1's VtepMAC;
- leases for free subnets name the underlay's broadcast and network addresses as PublicIP.

On node2 and node3, node1's route, neighbour and FDB entries (``ip -j``, ``bridge -j``)
are byte-identical before and after, each write is reported, and full passes go on: a
valid new peer is routed and a route deleted by hand comes back while the bad leases are
in etcd. Once node1's agent runs again it writes its own lease back.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycni.cluster import subnet as sn
from pycni.cluster.etcd import MAX_RESPONSE, Etcd, EtcdResponseTooLarge
from pycni.cluster.lease import LeaseInfo, LeaseStore
from pycni.playground import cluster
from tests import harness
from tests.integration.cluster_helpers import MARKS, pycni, wait_for

pytestmark = MARKS

TTL = 9
RECONCILE = 1.0
DEVICE = "pycni.1"
NEW_PEER = ipaddress.IPv4Network("10.244.243.0/24")
NEW_PEER_MAC = "02:00:00:00:02:43"
state_up_at: dict[str, float] = {}  # cluster root -> when `cluster up` returned


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterState]:
    root = tmp_path_factory.mktemp("cluster-hijack") / "state"
    proc = pycni(
        "cluster", "--state-dir", str(root), "up", "--nodes", "3", "--pods-per-node", "0",
        "--backend", "vxlan", "--prefix", f"{harness.RUN_PREFIX}hj-", "--ttl", str(TTL),
        "--reconcile-interval", str(RECONCILE),
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        up = cluster.ClusterState.load(str(root))
        state_up_at[up.root] = time.monotonic()  # every agent has seen every key by now
        yield up
    finally:
        pycni("cluster", "--state-dir", str(root), "down", timeout=180)


def _logs(state: cluster.ClusterState) -> str:
    return "\n".join(
        f"--- {n.name}\n{Path(n.agent_log).read_text(errors='replace')[-4000:]}"
        for n in state.nodes
    )


def _entries(ns: harness.Namespace, subnet: str, mac: str) -> str:
    """The node's route, neighbour and FDB entries for one peer, as the tools print them."""
    gateway = subnet.split("/")[0]
    routes = ns.json("ip", "-j", "route", "show", "table", "all")
    neigh = ns.json("ip", "-j", "neigh", "show", "dev", DEVICE)
    fdb = ns.json("bridge", "-j", "fdb", "show", "dev", DEVICE)
    assert isinstance(routes, list) and isinstance(neigh, list) and isinstance(fdb, list)
    mine = [r for r in routes if r.get("dst") == subnet]
    mine += [n for n in neigh if n.get("dst") == gateway]
    mine += [f for f in fdb if f.get("mac") == mac]
    return json.dumps(mine, sort_keys=True)


def _tables(ns: harness.Namespace) -> str:
    return "".join(
        ns.run(*argv).stdout
        for argv in (
            ("ip", "-j", "-4", "route", "show"),
            ("ip", "-j", "neigh", "show", "dev", DEVICE),
            ("bridge", "-j", "fdb", "show", "dev", DEVICE),
        )
    )


@contextlib.contextmanager
def _paused_with_lease_kept(etcd: Etcd, pid: int, lease: int) -> Iterator[None]:
    """The agent ``pid`` stopped (it renews nothing, restores nothing) while the test keeps
    its etcd lease alive: the node is live, only its agent does not run."""
    done = threading.Event()

    def keep() -> None:
        while not done.wait(1.0):
            with contextlib.suppress(Exception):
                etcd.keepalive(lease)

    keeper = threading.Thread(target=keep, daemon=True)
    os.kill(pid, signal.SIGSTOP)
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join()
        os.kill(pid, signal.SIGCONT)


JUNK = 10_000
JUNK_NAME = 830  # bytes of padding per junk key: 10,000 names are over 8 MiB


def _put_junk(etcd: Etcd, prefix: str) -> int:
    """``JUNK`` keys under ``prefix`` that name no subnet (128 puts per transaction, etcd's
    default limit); returns the bytes of their names."""
    names = [f"{prefix}{i:05d}-{'x' * JUNK_NAME}" for i in range(JUNK)]
    for start in range(0, JUNK, 128):
        puts = [
            {"request_put": {"key": base64.b64encode(n.encode()).decode(), "value": ""}}
            for n in names[start : start + 128]
        ]
        etcd.call("kv/txn", {"success": puts})
    return sum(len(n) for n in names)


def test_junk_keys_under_the_prefix_stop_neither_passes_nor_leasing(
    state: cluster.ClusterState,
) -> None:
    """Issue 32 item 5: 10,000 keys naming no subnet, over 8 MiB of names, made both the
    listing and its keys-only fallback exceed the answer cap: no agent reconciled and no
    node could lease. The listing is paged and skips them: a route deleted by hand comes
    back, and a new node leases a subnet that every agent routes."""
    etcd = state.etcd()
    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    junk = store.subnets_prefix + "junk-"
    observer, other = state.nodes[0], state.nodes[1]
    ns = harness.Namespace(observer.name)
    lease, joined = 0, ""
    began = time.monotonic()
    patient = Etcd(etcd.endpoint, netns=etcd.netns, timeout=60.0)  # the test's own big calls
    try:
        assert _put_junk(patient, junk) > MAX_RESPONSE
        print(f"junk put in {time.monotonic() - began:.1f}s")
        with pytest.raises(EtcdResponseTooLarge):  # what the old fallback read
            patient.get_prefix(store.subnets_prefix, keys_only=True)
        wait_for(
            lambda: f"{JUNK} keys under the prefix name no subnet" in Path(observer.agent_log)
            .read_text(),
            30, "the observer to skip the junk", lambda: _logs(state),
        )  # fmt: skip
        print(f"junk skipped at {time.monotonic() - began:.1f}s")
        # every pass still reconciles: a route deleted by hand comes back
        route = other.subnet()
        ns.run("ip", "route", "del", route, "proto", "157")
        wait_for(
            lambda: route in cluster.node_routes(observer),
            20,
            "a full pass to put the deleted route back",
            lambda: _logs(state),
        )
        print(f"route back at {time.monotonic() - began:.1f}s")
        # a new node gets a subnet, and every agent routes it
        info = LeaseInfo(
            ipaddress.IPv4Address("10.99.0.78"), "vxlan", {"VNI": 1, "VtepMAC": "02:00:00:00:02:44"}
        )
        asked = time.monotonic()
        new = store.acquire(sn.NetworkConfig.parse(cluster.DEFAULT_NETWORK), info, 60)
        lease, joined = new.lease_id, str(new.subnet)
        print(f"leased {joined} in {time.monotonic() - asked:.1f}s")
        wait_for(
            lambda: all(str(new.subnet) in cluster.node_routes(n) for n in state.nodes),
            20,
            f"every agent to route the new node's {new.subnet}",
            lambda: _logs(state),
        )
        print(f"new node routed at {time.monotonic() - began:.1f}s")
        logs = "".join(Path(n.agent_log).read_text() for n in state.nodes)
        assert "cannot list leases" not in logs and "sync failed" not in logs, logs[-4000:]
    finally:
        patient.delete_prefix(junk)
        if lease:
            etcd.revoke(lease)
    wait_for(
        lambda: all(joined not in cluster.node_routes(n) for n in state.nodes),
        20,
        "the new node's routes to go with its lease",
        lambda: _logs(state),
    )


def _established(state: cluster.ClusterState) -> None:
    """Wait until every agent has known every key for a TTL: only such a key's deletion
    is held (a key made and deleted within a TTL is nobody's; see cluster/tenure.py)."""
    since = state_up_at[state.root]
    wait_for(lambda: time.monotonic() - since > TTL + 1, TTL + 5, "the keys to be a TTL old")


def test_lease_writes_do_not_move_a_live_nodes_pods(state: cluster.ClusterState) -> None:
    victim, *observers = state.nodes
    _established(state)
    etcd = state.etcd()
    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    subnet = victim.subnet()
    key = store.key(ipaddress.IPv4Network(subnet))
    original = etcd.get(key)
    assert original is not None and original.lease
    value = json.loads(original.value)
    mac = value["BackendData"]["VtepMAC"]
    nss = [harness.Namespace(n.name) for n in observers]
    for ns in nss:
        assert (
            f"{mac} dst {victim.address} " in ns.run("bridge", "fdb", "show", "dev", DEVICE).stdout
        )
    before = [_entries(ns, subnet, mac) for ns in nss]
    tables = [_tables(ns) for ns in nss]
    writer_lease = etcd.grant(60)
    free = {
        "mac": store.subnets_prefix + "10.244.240.0-24",
        "broadcast": store.subnets_prefix + "10.244.241.0-24",
        "network": store.subnets_prefix + "10.244.242.0-24",
    }
    assert victim.agent_pid is not None

    def reported(key: str, times: int = 1) -> bool:
        return all(
            Path(n.agent_log).read_text().count(f"ignoring lease {key}: ") >= times
            for n in observers
        )

    try:
        with _paused_with_lease_kept(etcd, victim.agent_pid, original.lease):
            # 1. another PublicIP over the live key: a plain put (lease ID 0)
            etcd.put(key, json.dumps({**value, "PublicIP": "10.99.0.250"}))
            wait_for(lambda: reported(key), 20, "the overwrite to be refused", lambda: _logs(state))
            # ... and deleted, then created again under the writer's own lease: refused
            # while the deleted key's tenure holds it (2/3 TTL), in which the owner's agent
            # (resumed now) writes its key back
            etcd.delete(key)
            etcd.create(key, json.dumps({**value, "PublicIP": "10.99.0.251"}), writer_lease)
            wait_for(
                lambda: reported(key, 2), 20, "the re-creation to be refused", lambda: _logs(state)
            )
            assert [_entries(ns, subnet, mac) for ns in nss] == before, _logs(state)
        # node1's agent runs again: it finds its key taken and writes its lease back
        wait_for(
            lambda: (
                (kv := etcd.get(key)) is not None
                and kv.lease == original.lease
                and json.loads(kv.value) == value
                and "restored" in Path(victim.agent_log).read_text()  # logged after the write
            ),
            30,
            "node1's agent to restore its lease",
            lambda: _logs(state),
        )
        assert [_entries(ns, subnet, mac) for ns in nss] == before, _logs(state)
        # 2. a free subnet with node1's VtepMAC; 3. the underlay's broadcast and network
        bd = {"VNI": 1, "VtepMAC": mac}
        etcd.put(free["mac"], json.dumps({**value, "PublicIP": "10.99.0.252", "BackendData": bd}))
        for name, address in (("broadcast", "10.99.0.255"), ("network", "10.99.0.0")):
            other = {"VNI": 1, "VtepMAC": f"02:00:00:00:02:{41 if name == 'broadcast' else 42}"}
            etcd.put(free[name], json.dumps({**value, "PublicIP": address, "BackendData": other}))
        # a valid node joins while all of that is in etcd, and a route deleted by hand
        # must come back: full passes run to the end
        etcd.put(
            store.key(NEW_PEER),
            json.dumps({**value, "PublicIP": "10.99.0.77",
                        "BackendData": {"VNI": 1, "VtepMAC": NEW_PEER_MAC}}),
            writer_lease,
        )  # fmt: skip
        third = observers[1].subnet()
        wait_for(
            lambda: all(str(NEW_PEER) in cluster.node_routes(n) for n in observers),
            20,
            "the valid new peer to be routed",
            lambda: _logs(state),
        )
        nss[0].run("ip", "route", "del", third, "proto", "157")
        wait_for(
            lambda: third in cluster.node_routes(observers[0]),
            20,
            "a full pass to put the deleted route back",
            lambda: _logs(state),
        )
        wait_for(
            lambda: all(reported(k) for k in free.values()),
            20,
            "every bad lease to be reported",
            lambda: _logs(state),
        )
        after = [_entries(ns, subnet, mac) for ns in nss]
        assert after == before, _logs(state)
        for ns in nss:
            fdb = ns.run("bridge", "fdb", "show", "dev", DEVICE).stdout
            assert "10.99.0.25" not in fdb and "10.99.0.0" not in fdb, fdb
            assert NEW_PEER_MAC in fdb
        logs = "".join(Path(n.agent_log).read_text() for n in observers)
        assert "sync failed" not in logs
        assert logs.count(f"ignoring lease {free['mac']}: VtepMAC {mac} ") == 2, logs
    finally:
        for k in [*free.values(), store.key(NEW_PEER)]:
            etcd.delete(k)
        etcd.revoke(writer_lease)
    wait_for(
        lambda: [_tables(ns) for ns in nss] == tables,
        20,
        "every observer's tables back to what they were",
        lambda: _logs(state),
    )
    assert [_entries(ns, subnet, mac) for ns in nss] == before


def _fdb_names(ns: harness.Namespace, address: str) -> bool:
    return f" dst {address} " in ns.run("bridge", "fdb", "show", "dev", DEVICE).stdout


def test_a_deleted_keys_route_goes_within_a_ttl(state: cluster.ClusterState) -> None:
    """Issue 32 item 1: the owner's etcd lease kept alive (by someone else: its agent is
    paused) does not keep its routes after its key is deleted for more than a TTL; the
    agent, resumed, writes its key back and is routed again."""
    victim, *observers = state.nodes
    _established(state)
    etcd = state.etcd()
    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    subnet = victim.subnet()
    key = store.key(ipaddress.IPv4Network(subnet))
    original = etcd.get(key)
    assert original is not None and victim.agent_pid is not None
    with _paused_with_lease_kept(etcd, victim.agent_pid, original.lease):
        etcd.delete(key)
        deleted = time.monotonic()
        wait_for(
            lambda: all(subnet not in cluster.node_routes(n) for n in observers),
            3 * TTL,
            "the deleted key's routes to go",
            lambda: _logs(state),
        )
        outlived = time.monotonic() - deleted
    assert outlived <= TTL, f"routes outlived their key by {outlived:.1f}s (TTL {TTL}s)"
    wait_for(
        lambda: all(cluster.node_routes(n).get(subnet) == subnet.split("/")[0] for n in observers),
        30,
        "the restored key to be routed again",
        lambda: _logs(state),
    )
    print(f"routes outlived their deleted key by {outlived:.2f}s (TTL {TTL}s)")


def test_a_writer_cannot_keep_a_re_leased_subnet(state: cluster.ClusterState) -> None:
    """Issue 32 item 1, the audit's attack: revoke the owner's etcd lease, put its key under
    the writer's own lease (the writer's address and VTEP), delete it 1.5 s later. The
    owner re-leases its subnet; every agent routes it to the owner again within a pass and
    the writer's address is nowhere (before: refused as "written by someone other than
    the holder of etcd lease <writer's>", and routed to the writer for as long as the
    writer kept its lease alive)."""
    victim, *observers = state.nodes
    etcd = state.etcd()
    store = LeaseStore(etcd, cluster.ETCD_PREFIX)
    subnet = victim.subnet()
    key = store.key(ipaddress.IPv4Network(subnet))
    original = etcd.get(key)
    assert original is not None and victim.agent_pid is not None
    value = json.loads(original.value)
    writer = {**value, "PublicIP": "10.99.0.66",
              "BackendData": {"VNI": 1, "VtepMAC": "02:00:00:00:02:66"}}  # fmt: skip
    nss = [harness.Namespace(n.name) for n in observers]
    writer_lease = etcd.grant(60)
    try:
        # the owner's agent paused so that it re-leases only after the writer's delete
        # (with the default TTL of 60 s its renewal comes 20 s later: the audit's timing)
        os.kill(victim.agent_pid, signal.SIGSTOP)
        try:
            etcd.revoke(original.lease)
            assert etcd.create(key, json.dumps(writer), writer_lease)
            wait_for(
                lambda: all(_fdb_names(ns, "10.99.0.66") for ns in nss),
                20,
                "the writer's key to be routed (it looks like a new node's)",
                lambda: _logs(state),
            )
            time.sleep(1.5)  # the audit's timing, not a wait for a condition
            etcd.delete(key)
        finally:
            os.kill(victim.agent_pid, signal.SIGCONT)
        wait_for(
            lambda: (kv := etcd.get(key)) is not None and json.loads(kv.value) == value,
            30,
            "the owner to re-lease its subnet",
            lambda: _logs(state),
        )
        released = time.monotonic()
        wait_for(
            lambda: all(
                _fdb_names(ns, victim.address) and not _fdb_names(ns, "10.99.0.66") for ns in nss
            ),
            RECONCILE + 5,
            "every agent to route the owner again",
            lambda: _logs(state),
        )
        print(f"owner routed again {time.monotonic() - released:.2f}s after re-leasing")
        owner_gateway = subnet.split("/")[0]
        for ns in nss:
            assert ns.run("ping", "-c1", "-W2", owner_gateway, check=False).returncode == 0
        logs = "".join(Path(n.agent_log).read_text() for n in observers)
        assert f"holder of etcd lease {writer_lease:x}" not in logs, logs[-4000:]
    finally:
        etcd.revoke(writer_lease)


def test_a_ca_file_with_an_http_endpoint_is_an_error(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not read: refused before\n")
    proc = subprocess.run(
        [cluster.sys.executable, "-m", cluster.AGENT_MARKER,
         "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-cafile", str(ca),
         "--network", "10.244.0.0/16", "--subnet-file", str(tmp_path / "subnet.env")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--etcd-cafile" in proc.stderr and "http://127.0.0.1:1" in proc.stderr, proc.stderr
    assert not (tmp_path / "subnet.env").exists()


def test_one_peer_the_kernel_refuses_costs_that_peer_alone(node: harness.Namespace) -> None:
    """The backend below the checks: a next hop the kernel refuses (EINVAL for the
    underlay's broadcast address) fails that peer; the others are routed,
    and a later sync without it leaves exactly the good routes."""
    from pycni.cluster.backend import Underlay
    from pycni.cluster.hostgw import HostGateway
    from pycni.cluster.lease import LeaseInfo
    from pycni.net.netlink.client import rtnl

    node.run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
    node.run("ip", "addr", "add", "10.99.0.11/24", "dev", "eth0")
    node.run("ip", "link", "set", "eth0", "up")
    node.run("ip", "link", "set", "eth0p", "up")
    own = ipaddress.IPv4Network("10.244.1.0/24")
    good = {
        ipaddress.IPv4Network(f"10.244.{i}.0/24"): LeaseInfo(
            ipaddress.IPv4Address(f"10.99.0.{10 + i}"), "host-gw"
        )
        for i in (2, 4)
    }
    bad = {
        ipaddress.IPv4Network("10.244.3.0/24"): LeaseInfo(
            ipaddress.IPv4Address("10.99.0.255"), "host-gw"
        ),
    }
    with node.entered():
        with rtnl() as kernel:
            index = kernel.find_link("eth0").index  # type: ignore[union-attr]
        backend = HostGateway(Underlay("eth0", index, ipaddress.IPv4Address("10.99.0.11"), 1500))
        applied = backend.sync(own, {**good, **bad})
        assert set(applied.failed) == set(bad), applied
        assert all("refused the route" in why for why in applied.failed.values())
        routes = {
            r["dst"]: r["gateway"] for r in node.json("ip", "-j", "route", "show", "proto", "157")
        }  # type: ignore[union-attr]
        assert routes == {str(s): str(i.public_ip) for s, i in good.items()}
        # the event path: one bad peer arriving alone changes nothing else
        more = {ipaddress.IPv4Network("10.244.6.0/24"): LeaseInfo(
            ipaddress.IPv4Address("10.99.0.16"), "host-gw")}  # fmt: skip
        applied = backend.update(own, good, {**good, **bad, **more})
        assert set(applied.failed) == set(bad), applied
        routes = {
            r["dst"]: r["gateway"] for r in node.json("ip", "-j", "route", "show", "proto", "157")
        }  # type: ignore[union-attr]
        assert routes == {str(s): str(i.public_ip) for s, i in {**good, **more}.items()}
        assert backend.sync(own, {}).failed == {}
        assert node.run("ip", "route", "show", "proto", "157").stdout == ""
