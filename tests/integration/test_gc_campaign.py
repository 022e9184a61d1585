"""A GC campaign: node-wide GC never gives a live pod's address or host veth away.

The node holds live pods whose namespaces are held in each way a runtime (or an accident)
can hold one: only by an open fd (the path was unmounted), only by a process with no cache
entry, and by a process after `ip netns del` removed the path the cache names.  A plain
cached pod is there too.  GC then runs with a zero grace period, directly and from places
that see the node partially (a mount namespace without /run/netns, `ip netns exec`, a PID
namespace of its own), each time with a pod that is really gone, and 10 more pods are
added.  What user nobody holds (mount or user namespaces with no process in them, a
non-dumpable process) stops none of it.  No address may end up with two pods; every live
pod keeps its address and its host veth; the dead pods' addresses are freed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from tests import harness
from tests.integration.netns_holders import NobodyHolder

PYCNI = str(Path(sys.executable).parent / "pycni")
GC_TIMEOUT = 600  # GC looks into every namespace of the machine
NET = "gccamp-net"
BRIDGE = "gccamp0"
SUBNET = "10.213.94.0/24"  # no other test uses it: GC keeps what any namespace has
RANGE = ("10.213.94.2", "10.213.94.15")

pytestmark = pytest.mark.kernel

# Holds a namespace open by fd, prints the fd number, and waits for stdin to close.
FD_HOLDER = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "print(fd, flush=True)\n"
    "sys.stdin.read()\n"
)
# Sits in the namespace it was started in until stdin closes.
PROCESS_HOLDER = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


class Holder:
    """A process that keeps a namespace alive; ``path`` opens that namespace."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        assert first, "the holder did not start"
        self.path = (
            f"/proc/{self.proc.pid}/ns/net"
            if first == "ready"
            else f"/proc/{self.proc.pid}/fd/{first}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def hold_by_fd(path: str) -> Holder:
    return Holder([sys.executable, "-c", FD_HOLDER, path])


def hold_by_process(path: str) -> Holder:
    return Holder(["nsenter", f"--net={path}", "--", sys.executable, "-c", PROCESS_HOLDER])


def addresses_in(path: str) -> list[str]:
    proc = subprocess.run(
        ["nsenter", f"--net={path}", "--", "ip", "-j", "addr", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [
        f"{a['local']}/{a['prefixlen']}"
        for item in json.loads(proc.stdout)
        for a in item["addr_info"]
    ]


class Campaign:
    def __init__(
        self,
        node: harness.Namespace,
        state: harness.State,
        cni_path: str,
        subnet: tuple[str, str, str] = (SUBNET, *RANGE),
    ) -> None:
        """``subnet``: (subnet, rangeStart, rangeEnd).  GC keeps an address that any
        namespace of the machine has, so a test that must see its own dead pods freed uses
        a subnet no other test (or another checkout's run of this file) does."""
        self.node, self.state, self.cni_path = node, state, cni_path
        self.ipam = {
            "type": "host-local",
            # 14 addresses: the 10 ADDs after GC wrap around to the freed ones, so an
            # address wrongly freed is handed to a second pod
            "ranges": [[{"subnet": subnet[0], "rangeStart": subnet[1], "rangeEnd": subnet[2]}]],
            "dataDir": str(state.data_dir),
        }
        self.plugin = {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipam": self.ipam}
        self.raw = json.dumps(
            {"cniVersion": "1.0.0", "name": NET, "plugins": [self.plugin]}
        ).encode()
        (state.conf_dir / "10-gccamp.conflist").write_bytes(self.raw)
        self.cni = CNIConfig([cni_path], cache_dir=str(state.cache_dir))
        self.holders: list[Holder] = []

    def cached_add(self, pod: harness.Namespace) -> tuple[str, str]:
        """ADD through the runtime (cached): (address, host veth)."""
        with self.node.entered():
            result = self.cni.add_network_list(conf_list_from_bytes(self.raw), self._rt(pod))
        host = next(i.name for i in result.interfaces if not i.sandbox and i.name != BRIDGE)
        return str(result.ips[0].address), host

    def cacheless_add(self, pod: harness.Namespace) -> tuple[str, str]:
        """ADD by exec'ing bridge directly, as a runtime that keeps no cache."""
        conf = {"cniVersion": "1.0.0", "name": NET, **self.plugin}
        with self.node.entered():
            run = harness.exec_plugin(
                Path(self.cni_path) / "bridge",
                "ADD",
                conf,
                container_id=pod.name,
                netns=pod.path,
                cni_path=self.cni_path,
            ).ok()
        data: Any = run.json
        host = next(
            i["name"] for i in data["interfaces"] if not i.get("sandbox") and i["name"] != BRIDGE
        )
        return str(data["ips"][0]["address"]), host

    @staticmethod
    def _rt(pod: harness.Namespace) -> RuntimeConf:
        return RuntimeConf(container_id=pod.name, netns=pod.path, ifname="eth0")

    def owners(self) -> dict[str, str]:
        out = {}
        for ip in self.state.reservations(NET):
            content = (self.state.data_dir / NET / ip).read_bytes().decode()
            out[ip] = content.split("\r\n")[0]
        return out

    def veths(self) -> set[str]:
        return {n for n in self.node.links() if n.startswith("veth")}

    def snapshot(self) -> tuple[dict[str, str], list[str], set[str]]:
        return self.owners(), self.state.cache_files(), self.veths()

    def gc(self, *wrapper: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "NETCONFPATH": str(self.state.conf_dir),
            "CNI_PATH": self.cni_path,
        }
        argv = [PYCNI, "gc", "--cache-dir", str(self.state.cache_dir), "--grace-period", "0"]
        return self.node.run(*wrapper, *argv, check=False, env=env, timeout=GC_TIMEOUT)

    def cleanup(self, *wrapper: str) -> subprocess.CompletedProcess[str]:
        argv = [
            PYCNI,
            "cleanup",
            "--netconf-dir",
            str(self.state.conf_dir),
            "--cache-dir",
            str(self.state.cache_dir),
            "--data-dir",
            str(self.state.data_dir),
            "--cni-path",
            self.cni_path,
            "--grace-period",
            "0",
        ]
        return self.node.run(*wrapper, *argv, check=False, timeout=GC_TIMEOUT)


@pytest.fixture
def campaign(
    node: harness.Namespace, tmp_state: harness.State, cni_path: str
) -> Iterator[Campaign]:
    run = Campaign(node, tmp_state, cni_path)
    try:
        yield run
    finally:
        for holder in run.holders:
            holder.stop()


# Places that see the node partially.
HIDDEN_NETNS = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs gc /run/netns && exec "$@"', "sh"]
OWN_PID_NS = ["unshare", "--pid", "--fork", "--mount-proc"]


def test_gc_campaign_keeps_every_live_pod_and_frees_the_dead_one(
    campaign: Campaign, pod_factory: Callable[[], harness.Namespace]
) -> None:
    live: dict[str, tuple[str, str, str]] = {}  # role -> (namespace path, address, host veth)

    plain = pod_factory()  # a cached pod under /run/netns: what a hidden /run/netns hides
    ip, host = campaign.cached_add(plain)
    live["plain"] = (plain.path, ip, host)

    fd_only = pod_factory()  # cached; then held only by an fd, its path unmounted
    ip, host = campaign.cached_add(fd_only)
    holder = hold_by_fd(fd_only.path)
    campaign.holders.append(holder)
    fd_only.delete()
    live["fd only"] = (holder.path, ip, host)

    process_only = pod_factory()  # no cache entry; held only by a process
    ip, host = campaign.cacheless_add(process_only)
    holder = hold_by_process(process_only.path)
    campaign.holders.append(holder)
    process_only.delete()
    live["process only"] = (holder.path, ip, host)

    deleted_inside = pod_factory()  # cached; `ip netns del` while a process is inside
    ip, host = campaign.cached_add(deleted_inside)
    holder = hold_by_process(deleted_inside.path)
    campaign.holders.append(holder)
    deleted_inside.delete()
    live["path removed, process inside"] = (holder.path, ip, host)

    def make_dead() -> tuple[harness.Namespace, str]:
        """A pod that is really gone: cached, its namespace deleted, its veth gone."""
        dead = pod_factory()
        dead_ip, dead_host = campaign.cached_add(dead)
        dead.delete()
        deadline = time.monotonic() + 30  # the kernel removes a dead namespace's veths lazily
        while dead_host in campaign.veths():
            assert time.monotonic() < deadline, "the dead pod's veth never went"
            time.sleep(0.05)
        return dead, dead_ip

    def assert_live_kept(what: object) -> None:
        owners, veths = campaign.owners(), campaign.veths()
        for role, (path, ip, host) in live.items():
            assert ip in addresses_in(path), (what, role)
            assert ip.split("/")[0] in owners, (what, role)
            assert host in veths, (what, role)

    for role, (path, ip, _host) in live.items():
        assert ip in addresses_in(path), role

    # From places that see the node partially GC works and stays safe (issue #32 item 4): a
    # mount namespace without /run/netns, `ip netns exec` (a mount namespace of its own), a
    # PID namespace of its own (a runtime in a container).  Each run frees a dead pod made
    # just before it, and every live pod keeps its address and host veth.
    views = {
        "hidden /run/netns": HIDDEN_NETNS,
        "ip netns exec": ["ip", "netns", "exec", campaign.node.name],
        "own PID namespace": OWN_PID_NS,
        "the node itself": [],
    }
    for view, wrapper in views.items():
        for run in (campaign.gc, campaign.cleanup):
            dead, dead_ip = make_dead()
            proc = run(*wrapper)
            what = (view, run.__name__)
            assert proc.returncode == 0, (what, proc.stdout, proc.stderr)
            assert f"DEL {NET} {dead.name} eth0" in proc.stdout, (what, proc.stdout)
            assert dead_ip.split("/")[0] not in campaign.owners(), what
            assert f"{NET}-{dead.name}-eth0" not in campaign.state.cache_files(), what
            assert_live_kept(what)

    # 10 more pods: no address is given out twice.
    added: dict[str, str] = {}
    for _ in range(10):
        pod = pod_factory()
        ip, _host = campaign.cached_add(pod)
        added[pod.name] = ip
    everyone = [ip for _path, ip, _host in live.values()] + list(added.values())
    assert len(set(everyone)) == len(everyone), everyone
    assert dead_ip in added.values()  # freed, and handed out again once the range wrapped

    owners = campaign.owners()
    veths = campaign.veths()
    for role, (path, ip, host) in live.items():
        assert ip in addresses_in(path), role  # still configured in the pod
        assert ip.split("/")[0] in owners, role  # and still reserved for it
        assert host in veths, role  # its host veth is still there
    assert len(set(owners.values())) == len(owners)

    # Once the holders are gone, so are their pods: GC frees their addresses.
    for holder in campaign.holders:
        holder.stop()
    held = {live[role][2] for role in ("fd only", "process only", "path removed, process inside")}
    deadline = time.monotonic() + 30  # their namespaces, and veths, go lazily
    while held & campaign.veths():
        assert time.monotonic() < deadline, "the held pods' veths never went"
        time.sleep(0.05)
    proc = campaign.gc()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    owners = campaign.owners()
    for role in ("fd only", "process only", "path removed, process inside"):
        assert live[role][1].split("/")[0] not in owners, role
    for name in added:  # the new pods are live: DEL them the regular way
        pod = harness.Namespace(name)
        with campaign.node.entered():
            campaign.cni.del_network_list(conf_list_from_bytes(campaign.raw), campaign._rt(pod))
    with campaign.node.entered():
        campaign.cni.del_network_list(conf_list_from_bytes(campaign.raw), campaign._rt(plain))
    assert campaign.owners() == {}
    deadline = time.monotonic() + 30
    while campaign.veths() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert campaign.veths() == set()


def test_host_local_gc_verb_keeps_a_live_pods_address_the_valid_list_forgot(
    campaign: Campaign, pod_factory: Callable[[], harness.Namespace]
) -> None:
    """The runtime's list is not the only evidence: a pod it does not list (another
    runtime's, held by a process after `ip netns del`) keeps its address; a gone one loses
    it; the listed one keeps it."""
    listed, forgotten, gone = pod_factory(), pod_factory(), pod_factory()
    listed_ip, _ = campaign.cacheless_add(listed)
    forgotten_ip, forgotten_host = campaign.cacheless_add(forgotten)
    gone_ip, _ = campaign.cacheless_add(gone)
    holder = hold_by_process(forgotten.path)
    campaign.holders.append(holder)
    forgotten.delete()
    gone.delete()
    conf = {
        "cniVersion": "1.1.0",
        "name": NET,
        "ipam": campaign.ipam,
        "cni.dev/valid-attachments": [{"containerID": listed.name, "ifname": "eth0"}],
    }
    with campaign.node.entered():
        run = harness.exec_plugin(
            Path(campaign.cni_path) / "host-local", "GC", conf, cni_path=campaign.cni_path
        ).ok()
    owners = campaign.owners()
    assert owners == {
        listed_ip.split("/")[0]: listed.name,
        forgotten_ip.split("/")[0]: forgotten.name,
    }, run.stderr
    assert gone_ip.split("/")[0] not in owners
    assert forgotten_ip in addresses_in(holder.path)

    holder.stop()  # now the forgotten pod is gone too, once the kernel has let it go:
    # a socket that was open in it (the GC above looked inside, `ip` just did) holds it for
    # the kernel's deferred free, 1-28 ms measured, and a GC within that window rightly sees
    # it alive (through the daemon the verb answers in ~5 ms). Its host veth goes with it.
    deadline = time.monotonic() + 30
    while forgotten_host in campaign.veths():
        assert time.monotonic() < deadline, "the forgotten pod's namespace never went"
        time.sleep(0.05)
    with campaign.node.entered():
        harness.exec_plugin(
            Path(campaign.cni_path) / "host-local", "GC", conf, cni_path=campaign.cni_path
        ).ok()
    assert campaign.owners() == {listed_ip.split("/")[0]: listed.name}
    conf_del = {"cniVersion": "1.0.0", "name": NET, **campaign.plugin}
    with campaign.node.entered():
        harness.exec_plugin(
            Path(campaign.cni_path) / "bridge",
            "DEL",
            conf_del,
            container_id=listed.name,
            netns=listed.path,
            cni_path=campaign.cni_path,
        ).ok()
    assert campaign.owners() == {}


@pytest.mark.parametrize(
    ("kinds", "octet"), [(("mnt",), 91), (("deep",), 92), (("user", "opaque"), 93)], ids=str
)
def test_nothing_user_nobody_holds_stops_gc_or_frees_a_live_pod(
    node: harness.Namespace,
    tmp_state: harness.State,
    cni_path: str,
    pod_factory: Callable[[], harness.Namespace],
    kinds: tuple[str, ...],
    octet: int,
) -> None:
    """Issue #32 item 3: nobody's mount namespace held by an fd with no process in it made
    every GC free nothing (999 / exit 4), as did a mount point of nobody's too long to
    resolve (`pycni gc` and `pycni cleanup`).  With each of nobody's holders in place, the GC
    verb, `pycni gc` and `pycni cleanup` each free a dead pod, and keep a listed pod and a
    live one the list forgot (held by an fd only, its path removed)."""
    net = f"10.213.{octet}"
    campaign = Campaign(node, tmp_state, cni_path, (f"{net}.0/24", f"{net}.2", f"{net}.15"))
    try:
        _nobody_campaign(campaign, pod_factory, kinds, net)
    finally:
        for holder in campaign.holders:
            holder.stop()


def _nobody_campaign(
    campaign: Campaign,
    pod_factory: Callable[[], harness.Namespace],
    kinds: tuple[str, ...],
    net: str,
) -> None:
    listed, forgotten = pod_factory(), pod_factory()
    listed_ip, _ = campaign.cached_add(listed)
    forgotten_ip, forgotten_host = campaign.cached_add(forgotten)
    holder = hold_by_fd(forgotten.path)
    campaign.holders.append(holder)
    forgotten.delete()
    nobody = [NobodyHolder(kind, f"{net}.{99 + n}") for n, kind in enumerate(kinds)]
    kind = "+".join(kinds)
    try:
        for gc in ("verb", "pycni gc", "pycni cleanup"):
            dead = pod_factory()
            add = campaign.cacheless_add if gc == "verb" else campaign.cached_add
            dead_ip, dead_host = add(dead)
            dead.delete()
            deadline = time.monotonic() + 30  # its namespace, and veth, go lazily: till
            while dead_host in campaign.veths():  # then its address is rightly seen live
                assert time.monotonic() < deadline, "the dead pod's veth never went"
                time.sleep(0.05)
            if gc == "verb":
                conf = {
                    "cniVersion": "1.1.0",
                    "name": NET,
                    "ipam": campaign.ipam,
                    "cni.dev/valid-attachments": [{"containerID": listed.name, "ifname": "eth0"}],
                }
                with campaign.node.entered():
                    run = harness.exec_plugin(
                        Path(campaign.cni_path) / "host-local",
                        "GC",
                        conf,
                        cni_path=campaign.cni_path,
                    ).ok()
                said = run.stderr
            else:
                proc = campaign.gc() if gc == "pycni gc" else campaign.cleanup()
                assert proc.returncode == 0, (gc, proc.stdout, proc.stderr)
                assert "refusing" not in proc.stderr, proc.stderr
                said = proc.stdout + proc.stderr
            owners = campaign.owners()
            assert dead_ip.split("/")[0] not in owners, (kind, gc, said)
            assert owners[listed_ip.split("/")[0]] == listed.name, (kind, gc)
            assert owners[forgotten_ip.split("/")[0]] == forgotten.name, (kind, gc)
            assert forgotten_ip in addresses_in(holder.path), (kind, gc)
            assert forgotten_host in campaign.veths(), (kind, gc)
    finally:
        for each in nobody:
            each.stop()
    holder.stop()
    deadline = time.monotonic() + 30
    while forgotten_host in campaign.veths():
        assert time.monotonic() < deadline, "the forgotten pod's namespace never went"
        time.sleep(0.05)
    with campaign.node.entered():
        campaign.cni.del_network_list(conf_list_from_bytes(campaign.raw), campaign._rt(listed))
    proc = campaign.gc()  # the forgotten pod's cached attachment: proven gone now
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert campaign.owners() == {}, proc.stdout + proc.stderr
