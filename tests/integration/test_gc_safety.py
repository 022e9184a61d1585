"""Node-wide GC (`pycni gc`, `pycni cleanup`) frees only what is proven gone.

One node holds, at the same time: an ADD stalled between IPAM and the cache write (the second
plugin of its chain blocks until released), a live pod of a runtime that keeps no cache
(plugins exec'd directly), a cached pod whose namespace was deleted, and a cache-less pod
whose namespace was deleted.  GC runs with a zero grace period, so what survives does so on
evidence alone (its address is configured in a live namespace), not on age.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from tests import harness

PYCNI = str(Path(sys.executable).parent / "pycni")
GC_TIMEOUT = 600  # GC looks into every namespace of the machine: a shared one may have 1000s
NET = "gcsafe-net"
BRIDGE = "gcsafe0"
SUBNET = "10.213.97.0/24"  # rare: GC looks for addresses in every namespace

pytestmark = pytest.mark.kernel

# A chained plugin that, on ADD, says it started and waits until released, then passes the
# previous result on: the ADD is stalled after bridge + host-local, before the cache write.
STALL_PLUGIN = """#!{python}
import json, os, sys, time
conf = json.load(sys.stdin)
marks = {marks!r}
if os.environ.get("CNI_COMMAND") == "ADD":
    open(os.path.join(marks, "started"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(marks, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)
    json.dump(conf.get("prevResult") or {{}}, sys.stdout)
"""


def _bridge_conf(data_dir: Path) -> dict[str, Any]:
    return {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": SUBNET}]],
            "dataDir": str(data_dir),
        },
    }


class Node:
    def __init__(
        self, node: harness.Namespace, state: harness.State, cni_path: str, tmp: Path
    ) -> None:
        self.node, self.state = node, state
        self.marks = tmp / "marks"
        self.marks.mkdir()
        stall_dir = tmp / "stall-bin"
        stall_dir.mkdir()
        plugin = stall_dir / "stall"
        plugin.write_text(STALL_PLUGIN.format(python=sys.executable, marks=str(self.marks)))
        plugin.chmod(0o755)
        self.cni_path = cni_path
        self.paths = [cni_path, str(stall_dir)]
        self.raw = json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": NET,
                "plugins": [_bridge_conf(state.data_dir), {"type": "stall"}],
            }
        ).encode()
        (state.conf_dir / "10-gcsafe.conflist").write_bytes(self.raw)
        self.cni = CNIConfig(self.paths, cache_dir=str(state.cache_dir))

    # -- the three kinds of pod ----------------------------------------------------------

    def cached_pod(self, pod: harness.Namespace) -> str:
        """A pod added through the runtime (stall released in advance): cached."""
        (self.marks / "release").touch()
        try:
            with self.node.entered():
                result = self.cni.add_network_list(conf_list_from_bytes(self.raw), self._rt(pod))
        finally:
            (self.marks / "release").unlink()
            (self.marks / "started").unlink(missing_ok=True)
        return str(result.ips[0].address.ip)

    def cacheless_pod(self, pod: harness.Namespace) -> str:
        """A pod whose runtime exec'd bridge itself and keeps no cache."""
        conf = {"cniVersion": "1.0.0", "name": NET, **_bridge_conf(self.state.data_dir)}
        with self.node.entered():
            run = harness.exec_plugin(
                Path(self.cni_path) / "bridge",
                "ADD",
                conf,
                container_id=pod.name,
                netns=pod.path,
                cni_path=self.cni_path,
            ).ok()
        return str(run.json["ips"][0]["address"]).split("/")[0]  # type: ignore[index]

    def cacheless_del(self, pod: harness.Namespace) -> None:
        conf = {"cniVersion": "1.0.0", "name": NET, **_bridge_conf(self.state.data_dir)}
        with self.node.entered():
            harness.exec_plugin(
                Path(self.cni_path) / "bridge",
                "DEL",
                conf,
                container_id=pod.name,
                netns=pod.path,
                cni_path=self.cni_path,
            ).ok()

    @staticmethod
    def _rt(pod: harness.Namespace) -> RuntimeConf:
        return RuntimeConf(container_id=pod.name, netns=pod.path, ifname="eth0")

    # -- observing and running GC ---------------------------------------------------------

    def owners(self) -> dict[str, str]:
        """Reserved IP -> owning container ID, straight from the store."""
        out = {}
        for ip in self.state.reservations(NET):
            content = (self.state.data_dir / NET / ip).read_bytes().decode()
            out[ip] = content.split("\r\n")[0]
        return out

    def veths(self, expected: int) -> list[str]:
        """The node's veths, once the kernel has removed those of deleted namespaces."""
        deadline = time.monotonic() + 30
        while True:
            names = sorted(n for n in self.node.links() if n.startswith("veth"))
            if len(names) <= expected or time.monotonic() > deadline:
                return names
            time.sleep(0.1)

    def snapshot(self) -> tuple[dict[str, str], list[str], list[str]]:
        links = sorted(n for n in self.node.links() if n.startswith("veth"))
        return self.owners(), self.state.cache_files(), links

    def dirs(self) -> list[str]:
        return [
            "--netconf-dir",
            str(self.state.conf_dir),
            "--cache-dir",
            str(self.state.cache_dir),
            "--data-dir",
            str(self.state.data_dir),
        ]

    def run_gc(self, command: str, *extra: str) -> str:
        if command == "cleanup":
            argv = [PYCNI, "cleanup", *self.dirs(), "--cni-path", ":".join(self.paths), *extra]
            proc = self.node.run(*argv, check=False, timeout=GC_TIMEOUT)
        else:
            env = {
                **os.environ,
                "NETCONFPATH": str(self.state.conf_dir),
                "CNI_PATH": ":".join(self.paths),
            }
            argv = [PYCNI, "gc", "--cache-dir", str(self.state.cache_dir), *extra]
            proc = self.node.run(*argv, check=False, env=env, timeout=GC_TIMEOUT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout


@pytest.fixture
def gcnode(
    node: harness.Namespace, tmp_state: harness.State, cni_path: str, tmp_path: Path
) -> Node:
    return Node(node, tmp_state, cni_path, tmp_path)


class StalledAdd:
    """An ADD through the runtime, parked in the stall plugin until ``release``."""

    def __init__(self, net: Node, pod: harness.Namespace) -> None:
        self.net, self.pod = net, pod
        self.error: BaseException | None = None
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with self.net.node.entered():
                self.result = self.net.cni.add_network_list(
                    conf_list_from_bytes(self.net.raw), self.net._rt(self.pod)
                )
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not (self.net.marks / "started").exists():
            assert self.thread.is_alive(), f"the ADD ended early: {self.error}"
            assert time.monotonic() < deadline, "the stalled ADD never reached its second plugin"
            time.sleep(0.05)

    def finish(self) -> str:
        (self.net.marks / "release").touch()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        assert self.error is None, self.error
        return str(self.result.ips[0].address.ip)


@pytest.fixture
def stalled(gcnode: Node, pod_factory: Callable[[], harness.Namespace]) -> Iterator[StalledAdd]:
    add = StalledAdd(gcnode, pod_factory())
    try:
        yield add
    finally:
        (gcnode.marks / "release").touch()
        add.thread.join(timeout=60)


@pytest.mark.parametrize("command", ["gc", "cleanup"])
def test_gc_keeps_a_stalled_add_and_a_cacheless_pod_and_frees_dead_pods(
    gcnode: Node,
    stalled: StalledAdd,
    pod_factory: Callable[[], harness.Namespace],
    command: str,
) -> None:
    live_cacheless, dead_cached, dead_cacheless = pod_factory(), pod_factory(), pod_factory()
    cacheless_ip = gcnode.cacheless_pod(live_cacheless)
    dead_ip = gcnode.cached_pod(dead_cached)
    dead_cacheless_ip = gcnode.cacheless_pod(dead_cacheless)
    stalled.start()
    owners = gcnode.owners()
    stalled_ip = next(ip for ip, cid in owners.items() if cid == stalled.pod.name)
    assert gcnode.state.cache_files() == [f"{NET}-{dead_cached.name}-eth0"]
    dead_cached.delete()
    dead_cacheless.delete()
    assert len(gcnode.veths(2)) == 2  # the kernel removes dead namespaces' veths lazily

    out = gcnode.run_gc(command, "--grace-period", "0")

    assert gcnode.owners() == {stalled_ip: stalled.pod.name, cacheless_ip: live_cacheless.name}
    assert f"DEL {NET} {dead_cached.name} eth0" in out
    assert dead_cacheless_ip in out and dead_ip not in gcnode.owners()
    assert gcnode.state.cache_files() == []
    assert f"{cacheless_ip}/24" in live_cacheless.addresses("eth0")
    assert f"{stalled_ip}/24" in stalled.pod.addresses("eth0")
    assert len(gcnode.veths(2)) == 2  # the stalled pod's and the cache-less pod's

    assert stalled.finish() == stalled_ip  # the ADD completes with the address it was given
    assert gcnode.state.cache_files() == [f"{NET}-{stalled.pod.name}-eth0"]
    gcnode.run_gc(command, "--grace-period", "0")  # both pods are live: nothing to do
    assert gcnode.owners() == {stalled_ip: stalled.pod.name, cacheless_ip: live_cacheless.name}

    with gcnode.node.entered():
        gcnode.cni.del_network_list(conf_list_from_bytes(gcnode.raw), gcnode._rt(stalled.pod))
    gcnode.cacheless_del(live_cacheless)
    assert gcnode.owners() == {}


def test_default_grace_period_keeps_even_dead_pods_that_are_young(
    gcnode: Node, pod_factory: Callable[[], harness.Namespace]
) -> None:
    dead = pod_factory()
    gcnode.cached_pod(dead)
    dead.delete()
    assert gcnode.veths(0) == []
    before = gcnode.snapshot()
    assert "nothing to clean" in gcnode.run_gc("gc", "--dry-run")
    gcnode.run_gc("cleanup")
    assert gcnode.snapshot() == before
    gcnode.run_gc("cleanup", "--grace-period", "0")
    assert gcnode.snapshot() == ({}, [], [])


@pytest.mark.parametrize("command", ["gc", "cleanup"])
def test_dry_run_changes_nothing_and_names_what_and_why(
    gcnode: Node,
    stalled: StalledAdd,
    pod_factory: Callable[[], harness.Namespace],
    command: str,
) -> None:
    live_cacheless, dead = pod_factory(), pod_factory()
    gcnode.cacheless_pod(live_cacheless)
    dead_ip = gcnode.cached_pod(dead)
    stalled.start()
    dead.delete()
    assert len(gcnode.veths(2)) == 2
    before = gcnode.snapshot()

    out = gcnode.run_gc(command, "--dry-run", "--grace-period", "0")

    assert gcnode.snapshot() == before
    lines = out.splitlines()
    assert all(line.startswith("would remove ") for line in lines), out
    cache_file = gcnode.state.cache_dir / "results" / f"{NET}-{dead.name}-eth0"
    (attachment,) = [line for line in lines if line.startswith("would remove attachment")]
    assert str(cache_file) in attachment and f"namespace {dead.path} is gone" in attachment
    (reservation,) = [line for line in lines if line.startswith("would remove reservation")]
    assert str(gcnode.state.data_dir / NET / dead_ip) in reservation
    assert "is gone" in reservation
    assert live_cacheless.name not in out and stalled.pod.name not in out
    assert len(lines) == 2

    stalled.finish()
    gcnode.run_gc(command, "--grace-period", "0")
    assert sorted(gcnode.owners().values()) == sorted([stalled.pod.name, live_cacheless.name])
    with gcnode.node.entered():
        gcnode.cni.del_network_list(conf_list_from_bytes(gcnode.raw), gcnode._rt(stalled.pod))
    gcnode.cacheless_del(live_cacheless)


CORRUPT_CACHES = {
    "truncated": None,  # the first half of a real entry
    "garbage": b"\x00\xff\xfenot json at all{{{",
    "empty": b"",
    "array": b"[1, 2, 3]",
    "wrong-types": json.dumps(
        {
            "kind": "cniCacheV1",
            "containerId": 5,
            "ifName": ["eth0"],
            "networkName": {"x": 1},
            "netns": 7,
            "config": 3,
            "result": "nope",
            "capabilityArgs": {"portMappings": 9},
        }
    ).encode(),
    "wrong-nested-types": json.dumps(
        {
            "kind": "cniCacheV1",
            "containerId": "c-nested",
            "ifName": "eth0",
            "networkName": NET,
            "netns": "/run/netns/does-not-exist-gcsafe",
            "result": {"ips": 7, "interfaces": "eth0", "ip4": []},
            "capabilityArgs": {"portMappings": [1, "x"]},
        }
    ).encode(),
    "deep": b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("command", ["gc", "cleanup"])
def test_corrupt_cache_files_are_skipped_by_gc_cleanup_and_inspect(
    gcnode: Node, pod_factory: Callable[[], harness.Namespace], command: str
) -> None:
    keep, dead = pod_factory(), pod_factory()
    gcnode.cached_pod(keep)
    gcnode.cached_pod(dead)
    dead.delete()
    assert len(gcnode.veths(1)) == 1  # the kernel removes a dead namespace's veth lazily
    results = gcnode.state.cache_dir / "results"
    real = (results / f"{NET}-{keep.name}-eth0").read_bytes()
    for name, data in CORRUPT_CACHES.items():
        body = real[: len(real) // 2] if data is None else data
        (results / f"{NET}-corrupt-{name}-eth0").write_bytes(body)

    proc = gcnode.node.run(
        PYCNI, "inspect", *gcnode.dirs(), "--json", "--grace-period", "0", timeout=GC_TIMEOUT
    )
    data = json.loads(proc.stdout)
    # an entry whose identity is sound but whose result is junk is read, the junk ignored
    ids = sorted(a["container_id"] for a in data["attachments"])
    assert ids == sorted([keep.name, dead.name, "c-nested"])
    unreadable = [name for name in CORRUPT_CACHES if name != "wrong-nested-types"]
    for name in unreadable:
        assert any(f"corrupt-{name}-eth0" in p for p in data["problems"]), name
    text = gcnode.node.run(PYCNI, "inspect", *gcnode.dirs(), timeout=GC_TIMEOUT).stdout
    assert keep.name in text

    if command == "cleanup":
        argv = [PYCNI, "cleanup", *gcnode.dirs(), "--cni-path", ":".join(gcnode.paths)]
        proc = gcnode.node.run(*argv, "--grace-period", "0", check=False, timeout=GC_TIMEOUT)
    else:
        env = {
            **os.environ,
            "NETCONFPATH": str(gcnode.state.conf_dir),
            "CNI_PATH": ":".join(gcnode.paths),
        }
        argv = [PYCNI, "gc", "--cache-dir", str(gcnode.state.cache_dir), "--grace-period", "0"]
        proc = gcnode.node.run(*argv, check=False, env=env, timeout=GC_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "corrupt-garbage" in proc.stderr  # named in a log line, not fatal
    assert list(gcnode.owners().values()) == [keep.name]
    cached = gcnode.state.cache_files()
    assert f"{NET}-{keep.name}-eth0" in cached and f"{NET}-{dead.name}-eth0" not in cached
    for name in unreadable:  # not ours to judge: left for the operator, reported
        assert f"{NET}-corrupt-{name}-eth0" in cached
    assert f"{NET}-corrupt-wrong-nested-types-eth0" not in cached  # its namespace is gone

    # the per-network GC of the runtime (cnitool's `gc NET NETNS`) skips them as well
    env = {
        **os.environ,
        "NETCONFPATH": str(gcnode.state.conf_dir),
        "CNI_PATH": ":".join(gcnode.paths),
    }
    proc = gcnode.node.run(
        PYCNI,
        "gc",
        "--cache-dir",
        str(gcnode.state.cache_dir),
        NET,
        keep.path,
        env=env,
        timeout=GC_TIMEOUT,
    )
    assert gcnode.owners() == {}
    for name in unreadable:
        (results / f"{NET}-corrupt-{name}-eth0").unlink()


def test_an_address_in_an_unnamed_namespace_keeps_its_reservation(gcnode: Node) -> None:
    """A runtime may hold its pod's namespace only through a process: still a live pod."""
    ip = "10.213.97.77"
    held = subprocess.Popen(
        [
            "unshare",
            "--net",
            "sh",
            "-c",
            f"ip link add a0 type veth peer name b0 && ip addr add {ip}/32 dev a0 "
            "&& exec sleep 120",
        ]
    )
    try:
        store = gcnode.state.data_dir / NET
        store.mkdir(parents=True, exist_ok=True)
        (store / ip).write_bytes(b"unnamed-pod\r\neth0")
        deadline = time.monotonic() + 30
        while f"pid {held.pid}" not in _address_holders(gcnode, ip):
            assert time.monotonic() < deadline, "the scan never saw the unnamed namespace"
            time.sleep(0.2)
        gcnode.run_gc("cleanup", "--grace-period", "0")
        assert gcnode.owners() == {ip: "unnamed-pod"}
    finally:
        held.kill()
        held.wait()
    gcnode.run_gc("cleanup", "--grace-period", "0")
    assert gcnode.owners() == {}


def _address_holders(gcnode: Node, ip: str) -> list[str]:
    proc = gcnode.node.run(PYCNI, "inspect", *gcnode.dirs(), "--json", timeout=GC_TIMEOUT)
    holders: list[str] = json.loads(proc.stdout)["live_addresses"].get(ip, [])
    return holders
