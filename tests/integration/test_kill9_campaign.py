"""A kill -9 campaign: ADD/DEL with the plugin (or the daemon) killed at chosen points.

A few pods cycle through ADD and DEL of bridge + host-local (with ipMasq rules) through the
runtime.  Run 1 execs in-process entry points and kills the plugin process with SIGKILL (the
runtime's deadline does it, with its process group); run 2 sends the calls to a daemon,
SIGKILLs the daemon and restarts it.  A pod whose call failed is DELeted next, as a runtime
must.

Where the kills land is chosen, not drawn: a kill moment is a fraction of a typical call of
that verb, and the fractions are spread evenly over the whole call (0.1 to 1.3 of it in run
1, 0 to 1.2 in run 2, a golden-ratio sequence so that the moments next to each other in time
are far apart in the call).  Each moment is used once for an ADD and once for a DEL, and the
DELs take turns between attached pods and pods left half-made by a killed call.  After each
pair of kills one call runs without a kill (churn, or the runtime's DEL after a failure); the
typical duration is the running median of those calls, per verb, so the moments follow the
machine's load.  Earlier versions made 500 + 250 calls with random kill moments (about 310
kills); an even grid of 40 + 16 moments per verb (112 kills) reaches every part of ADD and DEL
(python start-up, IPAM, the veth, the rules, the cache write) with about a quarter of the
calls, and the outcome of a kill in a given
part does not depend on how often it is repeated.  ``PYCNI_KILL9_POINTS`` and
``PYCNI_KILL9_DAEMON_POINTS`` set the number of moments for a longer hunt.

After every step no address belongs to two live pods: the IPv4 addresses configured in the
pod namespaces (read from the kernel) are distinct, and the store holds a reservation naming
that pod for each.  At the end, DEL of every pod plus the node-wide GC leaves no veth, no
masquerade rule, no reservation, no cache file and no temp file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pycni.entrypoints import install
from pycni.net.netfilter.ipmasq import nft_backend as masq_nft
from pycni.net.netlink.client import rtnl
from pycni.net.ns import NetNS
from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from pycni.spec.errors import CNIError
from tests import harness

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

PYCNI = str(Path(sys.executable).parent / "pycni")
GC_TIMEOUT = 600  # GC looks into every namespace of the machine: a shared one may have 1000s
NET = "kill9-net"
BRIDGE = "kill9br0"
SUBNET = "10.214.58.0/28"  # 13 addresses for 4 pods: addresses are reused all the time
PODS = 4
POINTS = int(os.environ.get("PYCNI_KILL9_POINTS", "40"))  # run 1: kill moments per verb
DAEMON_POINTS = int(os.environ.get("PYCNI_KILL9_DAEMON_POINTS", "16"))  # run 2 (restarts ~1 s)


@dataclass
class Pod:
    ns: harness.Namespace
    state: str = "clean"  # clean | attached | dirty (a call failed: DEL it next)

    @property
    def rt(self) -> RuntimeConf:
        return RuntimeConf(container_id=self.ns.name, netns=self.ns.path, ifname="eth0")


@dataclass
class Campaign:
    node: harness.Namespace
    state: harness.State
    plugin_dir: Path
    pods: list[Pod]
    kills: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    killed_after_ipam: int = 0  # ADDs that died holding a reservation: the window that matters

    def __post_init__(self) -> None:
        self.raw = json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": NET,
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": SUBNET}]],
                            "dataDir": str(self.state.data_dir),
                        },
                    }
                ],
            }
        ).encode()
        (self.state.conf_dir / "10-kill9.conflist").write_bytes(self.raw)
        self.conf = conf_list_from_bytes(self.raw)
        self.cni = CNIConfig([str(self.plugin_dir)], cache_dir=str(self.state.cache_dir))

    def call(self, pod: Pod, timeout: float | None = None) -> float:
        """ADD a clean pod, DEL any other; update its state; the call's duration."""
        verb = "ADD" if pod.state == "clean" else "DEL"
        start = time.monotonic()
        try:
            with self.node.entered():
                if verb == "ADD":
                    self.cni.add_network_list(self.conf, pod.rt, timeout=timeout)
                    pod.state = "attached"
                else:
                    self.cni.del_network_list(self.conf, pod.rt, timeout=timeout)
                    pod.state = "clean"
        except CNIError as err:
            pod.state = "dirty"
            cause = err.__cause__ if isinstance(err.__cause__, CNIError) else err
            kind = type(cause).__name__
            self.failures[kind] = self.failures.get(kind, 0) + 1
            if kind != "PluginTimeout":
                self.errors.append(f"{verb} {pod.ns.name}: {err}")
            if verb == "ADD" and self.reserved_by(pod):
                self.killed_after_ipam += 1
        return time.monotonic() - start

    # -- the invariant -------------------------------------------------------------------

    def pod_addresses(self, pod: Pod) -> list[str]:
        with NetNS.open(pod.ns.path) as handle, handle.entered(), rtnl() as kernel:
            return [
                str(a.interface.ip)
                for a in kernel.addresses(family=socket.AF_INET)
                if not a.interface.ip.is_loopback
            ]

    def reserved_by(self, pod: Pod) -> bool:
        store = self.state.data_dir / NET
        return any(
            self.store_owner(p.name) == pod.ns.name for p in store.iterdir() if p.name[0].isdigit()
        )

    def store_owner(self, ip: str) -> str | None:
        try:
            content = (self.state.data_dir / NET / ip).read_bytes().decode()
        except FileNotFoundError:
            return None
        return content.split("\r\n")[0]

    def check(self, step: int) -> None:
        """No address in two live pods; each pod's address is reserved in its name."""
        seen: dict[str, str] = {}
        for pod in self.pods:
            addresses = self.pod_addresses(pod)
            if pod.state == "attached":
                assert len(addresses) == 1, f"step {step}: {pod.ns.name} has {addresses}"
            for ip in addresses:
                where = f"step {step}"
                assert ip not in seen, f"{where}: {ip} is in {seen.get(ip)} and {pod.ns.name}"
                seen[ip] = pod.ns.name
                owner = self.store_owner(ip)
                assert owner == pod.ns.name, f"{where}: {ip} in {pod.ns.name}, store: {owner}"

    # -- the end ----------------------------------------------------------------------------

    def finish(self) -> None:
        """DEL every pod (no kill now), then the node-wide GC; nothing may be left."""
        for pod in self.pods:
            if pod.state != "clean":
                self.call(pod)
                assert pod.state == "clean", f"the final DEL of {pod.ns.name} failed"
        env = {**os.environ, "NETCONFPATH": str(self.state.conf_dir), "CNI_PATH": ""}
        argv = [PYCNI, "gc", "--cache-dir", str(self.state.cache_dir), "--grace-period", "0"]
        proc = self.node.run(*argv, env=env, check=False, timeout=GC_TIMEOUT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        veths = [n for n in self.node.links() if n.startswith("veth")]
        assert veths == []
        for pod in self.pods:
            assert "eth0" not in pod.ns.links()
        assert self.pod_rules() == []
        store = self.state.data_dir / NET
        left = sorted(p.name for p in store.iterdir()) if store.exists() else []
        assert [n for n in left if n != "lock" and not n.startswith("last_reserved_ip.")] == []
        assert all(n == "lock" or n[len("last_reserved_ip.") :].isdigit() for n in left), left
        results = self.state.cache_dir / "results"
        assert (sorted(os.listdir(results)) if results.exists() else []) == []

    def pod_rules(self) -> list[str]:
        """The per-pod masquerade state: the elements of the per-network address sets and any
        per-address rule of the old layout (the shared chains and their per-network rule
        stay, as the reference's table does)."""
        argv = ("nft", "-j", "list", "table", "inet", "cni_plugins_masquerade")
        out = self.node.run(*argv, check=False)
        ruleset = json.loads(out.stdout)["nftables"] if out.returncode == 0 else []
        found: list[str] = []
        for item in ruleset:
            for elem in item.get("set", {}).get("elem", []):
                found.append(json.dumps(elem, sort_keys=True))
            rule = item.get("rule")
            comment = str(rule.get("comment", "")) if rule else ""
            in_checks = bool(rule) and rule.get("chain") == "masq_checks"
            # a per-address rule of the old layout; ours (the per-network jump) is shared
            if in_checks and comment and not comment.startswith(masq_nft.RULE_PREFIX):
                found.append(comment)
        return found

    def calibrate(self) -> float:
        """Median duration of an unkilled call, to draw kill moments across a whole call."""
        samples = [self.call(pod) for pod in self.pods]
        assert len(self.pod_rules()) == len(self.pods)  # one element each: finish() expects none
        samples += [self.call(pod) for pod in self.pods]
        self.check(0)
        return statistics.median(samples)


@pytest.fixture
def pods(pod_factory: Callable[[], harness.Namespace]) -> list[Pod]:
    return [Pod(pod_factory()) for _ in range(PODS)]


def kill_moments(count: int, low: float, high: float) -> list[float]:
    """``count`` fractions of a call spread evenly over [low, high), in golden-ratio order (any
    run of consecutive moments covers the whole range, so a load spike hits no one part)."""
    golden = (5**0.5 - 1) / 2
    return [low + (high - low) * ((i * golden) % 1.0) for i in range(count)]


class Schedule:
    """Which pod takes the next kill of a verb, and how long a call of each verb takes now."""

    def __init__(self, campaign: Campaign, typical: float) -> None:
        self.campaign = campaign
        self.turns = deque(campaign.pods)
        self.durations = {verb: deque([typical], maxlen=9) for verb in ("ADD", "DEL")}
        self.half_made_next = True  # DEL kills take turns: a half-made pod, an attached one
        self.step = 0

    def typical(self, verb: str) -> float:
        """The running median of this verb's last calls made without a kill."""
        return statistics.median(self.durations[verb])

    def call(self, pod: Pod, timeout: float | None = 60, measured: bool = True) -> None:
        """One call and the invariant after it; ``measured``: made without a kill (a call
        that merely outran its kill moment is not: counting only those would bias the
        median down)."""
        verb = "ADD" if pod.state == "clean" else "DEL"
        failed = sum(self.campaign.failures.values())
        took = self.campaign.call(pod, timeout)
        if measured and sum(self.campaign.failures.values()) == failed:
            self.durations[verb].append(took)
        self.step += 1
        self.campaign.check(self.step)

    def pod_for(self, verb: str) -> Pod:
        """The pod whose turn it is among those whose next call is ``verb``; when there is
        none, a call without a kill on the next pod in turn makes one."""
        while True:
            ready = [p for p in self.turns if (p.state == "clean") == (verb == "ADD")]
            if verb == "DEL":
                kind = "dirty" if self.half_made_next else "attached"
                ready = [p for p in ready if p.state == kind] or ready
            if ready:
                pod = ready[0]
                if verb == "DEL":
                    self.half_made_next = not self.half_made_next
                break
            self.call(self.turns[0])
            self.turns.rotate(-1)
        self.turns.remove(pod)
        self.turns.append(pod)
        return pod

    def unkilled(self) -> None:
        """A call without a kill on the pod that waited longest: a runtime's DEL after a
        failure, or plain churn; it keeps the typical durations current."""
        self.call(self.turns[0])
        self.turns.rotate(-1)


def test_plugin_killed_at_every_part_of_add_and_del(
    node: harness.Namespace, tmp_state: harness.State, tmp_path: Path, pods: list[Pod]
) -> None:
    plugin_dir = tmp_path / "bin"
    install.install(plugin_dir, form="inprocess")
    campaign = Campaign(node, tmp_state, plugin_dir, pods)
    schedule = Schedule(campaign, campaign.calibrate())
    for moment in kill_moments(POINTS, 0.1, 1.3):
        for verb in ("ADD", "DEL"):
            pod = schedule.pod_for(verb)
            schedule.call(pod, timeout=moment * schedule.typical(verb), measured=False)
        schedule.unkilled()
    # The window that matters most is an ADD killed holding its reservation: host-local runs
    # in the last tenth of an ADD, so about 1 in 6 of the grid's ADD kills lands there, as
    # the load allows. More ADDs killed late in the call until 5 have.
    for moment in kill_moments(POINTS, 0.85, 1.15):
        if campaign.killed_after_ipam >= 5:
            break
        pod = schedule.pod_for("ADD")
        schedule.call(pod, timeout=moment * schedule.typical("ADD"), measured=False)
        schedule.unkilled()
    # 2 * POINTS kill moments, most of them inside the call
    assert campaign.failures.get("PluginTimeout", 0) >= POINTS // 2, campaign.failures
    assert campaign.errors == []  # a killed plugin is the only way a call fails
    assert campaign.killed_after_ipam >= 5, (campaign.killed_after_ipam, campaign.failures)
    campaign.finish()


class Daemon:
    """A pycni daemon on a private socket that can be SIGKILLed and started again."""

    def __init__(self, sock: str) -> None:
        self.sock = sock
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        argv = [sys.executable, "-m", "pycni.cli.daemon_cmd", "--socket", self.sock]
        self.proc = subprocess.Popen([*argv, "--log-level", "ERROR"])
        deadline = time.monotonic() + 60
        while True:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.sock)
                return
            except OSError:
                assert self.proc.poll() is None, "the pycni daemon exited at start"
                assert time.monotonic() < deadline, "the pycni daemon did not start"
                time.sleep(0.05)
            finally:
                probe.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(str(tmp_path / "kill9.sock"))
    d.start()
    try:
        yield d
    finally:
        d.stop()


def test_daemon_killed_at_every_part_of_add_and_del(
    node: harness.Namespace,
    tmp_state: harness.State,
    tmp_path: Path,
    pods: list[Pod],
    daemon: Daemon,
) -> None:
    plugin_dir = tmp_path / "bin"
    install.install(plugin_dir, form="auto", socket_path=daemon.sock)
    campaign = Campaign(node, tmp_state, plugin_dir, pods)
    schedule = Schedule(campaign, campaign.calibrate())
    for moment in kill_moments(DAEMON_POINTS, 0.0, 1.2):
        for verb in ("ADD", "DEL"):
            pod = schedule.pod_for(verb)
            killer = threading.Timer(moment * schedule.typical(verb), daemon.kill)
            killer.start()
            schedule.call(pod, measured=False)
            killer.join()
            assert daemon.proc is not None
            if daemon.proc.poll() is not None:
                campaign.kills += 1
                daemon.start()
        schedule.unkilled()
    # the timer kills the daemon during the call or just after it: nearly every time
    assert campaign.kills >= DAEMON_POINTS, (campaign.kills, campaign.failures)
    campaign.finish()
