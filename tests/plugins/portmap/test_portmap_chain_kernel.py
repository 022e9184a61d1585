"""portmap at the end of a real chain (loopback, bridge + host-local, portmap) in a node
namespace: TCP and UDP servers in a pod reached through host ports from the node (localhost
and its uplink address), from an "outside" namespace, from another pod and from the pod
itself (hairpin); hostIP restricts; IPv6; DEL (with and without runtimeConfig) and GC put the
ruleset back to the shared scaffolding. Both backends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pycni.plugins.meta.portmap.nft_chains import chain_name
from tests.harness import Namespace, State, exec_plugin

pytestmark = pytest.mark.kernel

GO_DIR = Path("/usr/lib/cni")
NET = "pmnet"
NODE_UP4, OUTSIDE4 = "192.0.2.1", "192.0.2.2"
NODE_UP6, OUTSIDE6 = "2001:db8:1::1", "2001:db8:1::2"
SUBNET4, SUBNET6 = "10.244.0.0/24", "fd00:244::/64"


def chain_dir(plugin_dir: Path, tmp_path: Path) -> Path:
    """CNI_PATH for the chain: ours where they exist (set PYCNI_PORTMAP_GO_FIRST=1 to use the
    Go bridge/host-local/loopback for the first links), our portmap last."""
    if not os.environ.get("PYCNI_PORTMAP_GO_FIRST") and all(
        (plugin_dir / n).exists() for n in ("bridge", "host-local", "loopback")
    ):
        return plugin_dir
    d = tmp_path / "chain-bin"
    d.mkdir(exist_ok=True)
    for name in ("bridge", "host-local", "loopback"):
        (d / name).symlink_to(GO_DIR / name)
    (d / "portmap").symlink_to(plugin_dir / "portmap")
    return d


@dataclass
class Env:
    node: Namespace
    outside: Namespace
    bin_dir: Path
    state: State
    portmap_extra: dict[str, Any] = field(default_factory=dict)
    pods: dict[str, tuple[Namespace, dict[str, Any]]] = field(default_factory=dict)

    def bridge_conf(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": NET,
            "type": "bridge",
            "bridge": "pmbr0",
            "isGateway": True,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "dataDir": str(self.state.data_dir),
                "ranges": [[{"subnet": SUBNET4}], [{"subnet": SUBNET6}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            },
        }

    def portmap_conf(self, prev: dict[str, Any] | None, mappings: list[dict[str, Any]] | None):
        conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": NET, "type": "portmap"}
        conf.update(self.portmap_extra)
        if mappings is not None:
            conf["runtimeConfig"] = {"portMappings": mappings}
        if prev is not None:
            conf["prevResult"] = prev
        return conf

    def run(
        self,
        plugin: str,
        command: str,
        conf: dict[str, Any],
        cid: str,
        pod: Namespace,
        ifname: str = "eth0",
        binary: Path | None = None,
    ) -> Any:
        with self.node.entered():
            return exec_plugin(
                binary or self.bin_dir / plugin,
                command,
                conf,
                container_id=cid,
                netns=pod.path,
                ifname=ifname,
                cni_path=str(self.bin_dir),
            )

    def add(self, cid: str, pod: Namespace, mappings: list[dict[str, Any]]) -> dict[str, Any]:
        lo = {"cniVersion": "1.0.0", "name": NET, "type": "loopback"}
        self.run("loopback", "ADD", lo, cid, pod, ifname="lo").ok()
        prev = self.run("bridge", "ADD", self.bridge_conf(), cid, pod).ok().json
        out = self.run("portmap", "ADD", self.portmap_conf(prev, mappings), cid, pod).ok().json
        assert out == prev, "portmap must pass prevResult through"
        self.pods[cid] = (pod, prev)
        return prev

    def delete(self, cid: str, mappings: list[dict[str, Any]] | None) -> None:
        pod, prev = self.pods.pop(cid)
        self.run("portmap", "DEL", self.portmap_conf(prev, mappings), cid, pod).ok()
        self.run("bridge", "DEL", self.bridge_conf(), cid, pod).ok()


def pod_ip(prev: dict[str, Any], family: int) -> str:
    for ip in prev["ips"]:
        addr = ip["address"].split("/")[0]
        if (":" in addr) == (family == 6):
            return addr
    raise AssertionError(f"no IPv{family} in {prev}")


@pytest.fixture
def env_factory(
    node: Namespace,
    pod_factory: Callable[[], Namespace],
    plugin_dir: Path,
    tmp_state: State,
    tmp_path: Path,
) -> Iterator[Callable[..., Env]]:
    made: list[Env] = []

    def make(**portmap_extra: Any) -> Env:
        outside = pod_factory()
        node.run(
            "ip",
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "out0",
            "netns",
            outside.name,
        )
        node.run("ip", "addr", "add", f"{NODE_UP4}/24", "dev", "up0")
        node.run("ip", "addr", "add", f"{NODE_UP6}/64", "dev", "up0", "nodad")
        node.run("ip", "link", "set", "up0", "up")
        outside.run("ip", "addr", "add", f"{OUTSIDE4}/24", "dev", "out0")
        outside.run("ip", "addr", "add", f"{OUTSIDE6}/64", "dev", "out0", "nodad")
        outside.run("ip", "link", "set", "out0", "up")
        outside.run("ip", "route", "add", SUBNET4, "via", NODE_UP4)
        node.run("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        env = Env(node, outside, chain_dir(plugin_dir, tmp_path), tmp_state, portmap_extra)
        made.append(env)
        return env

    yield make
    for env in made:
        for cid in list(env.pods):
            env.delete(cid, None)


# --- servers and clients ---------------------------------------------------------------------


@pytest.fixture
def servers() -> Iterator[Callable[[Namespace, str], None]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(pod: Namespace, tag: str) -> None:
        # UDP: one process answering every datagram itself. socat's UDP6-RECVFROM with fork
        # shares the socket with a child per datagram, and on a busy machine a child still
        # running could take (and answer elsewhere) the next client's datagram: flaky.
        udp = (
            "import socket\n"
            "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
            "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
            "s.bind(('::', 81))\n"
            "while True:\n"
            "    _data, peer = s.recvfrom(2048)\n"
            f"    s.sendto(b'udp-{tag}\\n', peer)\n"
        )
        for argv in (
            # TCP: the answer only after the client's "ping" is read, so the server never
            # closes with unread data (the kernel then sends RST instead of FIN, and the client
            # may lose the answer: an empty one, seen on a loaded machine)
            [
                "socat",
                "TCP6-LISTEN:80,fork,reuseaddr,ipv6only=0",
                f"SYSTEM:read -r request; echo tcp-{tag}",
            ],
            [sys.executable, "-c", udp],
        ):
            procs.append(
                subprocess.Popen(
                    ["nsenter", f"--net={pod.path}", "--", *argv],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 30  # python servers start slowly under load
        while time.monotonic() < deadline:
            out = pod.run("ss", "-Hlntu", check=False).stdout
            if ":80 " in out and ":81 " in out:
                return
            time.sleep(0.05)
        raise AssertionError(f"servers in {pod.name} did not start")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


UDP_CLIENT = """
import socket, sys
host, port, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
family = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
s.settimeout(wait)
s.sendto(b"ping\\n", (host, port))
try:
    print(s.recv(2048).decode().strip())
except OSError:
    pass
"""


def fetch(ns: Namespace, proto: str, host: str, port: int, attempts: int = 3) -> str:
    """What a TCP or UDP server at host:port answers ("" when nothing does). A single attempt
    (for answers expected to be empty) waits 1 s; otherwise each waits up to 4 s because the
    server forks a shell per request on a busy machine.

    TCP: socat with ``-t`` as well as ``-T``: once our "ping" is sent, socat would wait for the
    answer only its default 0.5 s, which a loaded machine's fork + shell can miss (an empty
    answer and exit code 0); the server closes after answering, so a longer ``-t`` costs
    nothing. UDP: a client that returns with the first datagram (socat would sit out ``-t``
    every time, UDP having no close)."""
    wait = "1" if attempts == 1 else "4"
    answer = ""
    for _ in range(attempts):
        if proto == "udp":
            argv = [sys.executable, "-c", UDP_CLIENT, host, str(port), wait]
        else:
            addr = f"[{host}]" if ":" in host else host
            target = f"TCP:{addr}:{port},connect-timeout={wait}"
            argv = ["socat", f"-T{wait}", f"-t{wait}", "-", target]
        proc = ns.run(*argv, check=False, input=b"ping\n", timeout=10)
        answer = proc.stdout.strip()
        if answer:
            return answer
        time.sleep(0.3)
    return answer


# --- ruleset snapshots ------------------------------------------------------------------------


def nft_ruleset(node: Namespace) -> str:
    return node.run("nft", "-s", "list", "ruleset").stdout


def iptables_nat(node: Namespace) -> str:
    out = []
    for tool in ("iptables-save", "ip6tables-save"):
        text = node.run(tool, "-t", "nat").stdout
        out += [
            re.sub(r"\[\d+:\d+\]", "", line)
            for line in text.splitlines()
            if not line.startswith("#")
        ]
    return "\n".join(out)


def assert_scaffold_only(node: Namespace) -> None:
    text = nft_ruleset(node)
    assert "chain pm-" not in text, text
    assert "elements" not in text, text
    saved = iptables_nat(node)
    assert "CNI-DN-" not in saved, saved


MAPPINGS = [
    {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
    {"hostPort": 8081, "containerPort": 81, "protocol": "udp"},
    {"hostPort": 8090, "containerPort": 80, "protocol": "tcp", "hostIP": NODE_UP4},
]


def scenario(
    env: Env, pod_factory: Callable[[], Namespace], servers: Callable[[Namespace, str], None]
) -> None:
    node, outside = env.node, env.outside
    before = (nft_ruleset(node), iptables_nat(node))
    pod1, pod2 = pod_factory(), pod_factory()
    prev1 = env.add("cid-pod1", pod1, MAPPINGS)
    env.add("cid-pod2", pod2, [])
    servers(pod1, "pod1")
    ip6 = pod_ip(prev1, 6)
    pod1.run(
        "sh",
        "-c",
        f"for i in $(seq 50); do ip -6 addr show tentative | grep -q {ip6} "
        "|| exit 0; sleep 0.1; done",
    )

    # node: localhost (route_localnet + masquerade) and its own addresses
    assert fetch(node, "tcp", "127.0.0.1", 8080) == "tcp-pod1"
    assert fetch(node, "udp", "127.0.0.1", 8081) == "udp-pod1"
    assert fetch(node, "tcp", NODE_UP4, 8080) == "tcp-pod1"
    # outside, over the uplink: IPv4 and IPv6
    assert fetch(outside, "tcp", NODE_UP4, 8080) == "tcp-pod1"
    assert fetch(outside, "udp", NODE_UP4, 8081) == "udp-pod1"
    assert fetch(outside, "tcp", NODE_UP6, 8080) == "tcp-pod1"
    assert fetch(outside, "udp", NODE_UP6, 8081) == "udp-pod1"
    # another pod, and the pod itself (hairpin)
    assert fetch(pod2, "tcp", NODE_UP4, 8080) == "tcp-pod1"
    assert fetch(pod2, "udp", NODE_UP4, 8081) == "udp-pod1"
    assert fetch(pod1, "tcp", NODE_UP4, 8080) == "tcp-pod1"
    assert fetch(pod1, "udp", NODE_UP4, 8081) == "udp-pod1"
    # hostIP: only on that address
    assert fetch(outside, "tcp", NODE_UP4, 8090) == "tcp-pod1"
    assert fetch(pod2, "tcp", "10.244.0.1", 8090, attempts=1) == ""
    # no transit hijack: traffic through the node to a non-local address is not DNATed
    assert fetch(outside, "tcp", "10.244.0.250", 8080, attempts=1) == ""

    # CHECK passes, and fails when the rules are gone
    conf = env.portmap_conf(prev1, MAPPINGS)
    env.run("portmap", "CHECK", conf, "cid-pod1", pod1).ok()

    # DEL without runtimeConfig still removes everything of this attachment
    env.run("portmap", "DEL", env.portmap_conf(prev1, None), "cid-pod1", pod1).ok()
    assert env.run("portmap", "CHECK", conf, "cid-pod1", pod1).code != 0
    assert fetch(outside, "tcp", NODE_UP4, 8080, attempts=1) == ""
    assert_scaffold_only(node)
    scaffold = (nft_ruleset(node), iptables_nat(node))
    assert before[0] in scaffold[0] or not before[0].strip()

    # re-ADD, DEL with runtimeConfig: back to the same scaffolding
    env.run("portmap", "ADD", conf, "cid-pod1", pod1).ok()
    env.run("portmap", "ADD", conf, "cid-pod1", pod1).ok()  # idempotent
    assert fetch(outside, "tcp", NODE_UP4, 8080) == "tcp-pod1"
    env.run("portmap", "DEL", conf, "cid-pod1", pod1).ok()
    env.run("portmap", "DEL", conf, "cid-pod1", pod1).ok()  # idempotent
    assert (nft_ruleset(node), iptables_nat(node)) == scaffold

    # GC: only pod2 is valid, so pod1's mappings go; pod2's stay
    env.run("portmap", "ADD", conf, "cid-pod1", pod1).ok()
    prev2 = env.pods["cid-pod2"][1]
    m2 = [{"hostPort": 9090, "containerPort": 80, "protocol": "tcp"}]
    env.run("portmap", "ADD", env.portmap_conf(prev2, m2), "cid-pod2", pod2).ok()
    gc = env.portmap_conf(None, None)
    gc["cniVersion"] = "1.1.0"
    gc["cni.dev/valid-attachments"] = [{"containerID": "cid-pod2", "ifname": "eth0"}]
    env.run("portmap", "GC", gc, "", pod1).ok()
    assert fetch(outside, "tcp", NODE_UP4, 8080, attempts=1) == ""
    env.run("portmap", "CHECK", env.portmap_conf(prev2, m2), "cid-pod2", pod2).ok()
    gc["cni.dev/valid-attachments"] = []
    env.run("portmap", "GC", gc, "", pod1).ok()
    assert (nft_ruleset(node), iptables_nat(node)) == scaffold

    env.delete("cid-pod1", MAPPINGS)
    env.delete("cid-pod2", None)


def test_nftables_chain(
    env_factory: Callable[..., Env],
    pod_factory: Callable[[], Namespace],
    servers: Callable[[Namespace, str], None],
) -> None:
    env = env_factory()
    scenario(env, pod_factory, servers)
    text = nft_ruleset(env.node)
    assert "table inet pycni_portmap" in text
    assert "fib daddr type local jump hostports" in text


def test_iptables_chain(
    env_factory: Callable[..., Env],
    pod_factory: Callable[[], Namespace],
    servers: Callable[[Namespace, str], None],
) -> None:
    env = env_factory(backend="iptables")
    scenario(env, pod_factory, servers)
    saved = iptables_nat(env.node)
    assert "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT" in saved
    assert "-j CNI-HOSTPORT-MASQ" in saved
    # the top-level chains persist, our nft table was never needed
    assert "pycni_portmap" not in nft_ruleset(env.node)


def test_hostport_conflict_is_an_error(
    env_factory: Callable[..., Env], pod_factory: Callable[[], Namespace]
) -> None:
    env = env_factory()
    pod1, pod2 = pod_factory(), pod_factory()
    env.add("cid-a", pod1, MAPPINGS[:1])
    prev = env.run("bridge", "ADD", env.bridge_conf(), "cid-b", pod2).ok().json
    env.pods["cid-b"] = (pod2, prev)
    run = env.run("portmap", "ADD", env.portmap_conf(prev, MAPPINGS[:1]), "cid-b", pod2)
    assert run.code != 0
    assert "8080" in json.loads(run.stdout)["msg"]
    winner = env.portmap_conf(env.pods["cid-a"][1], MAPPINGS[:1])
    text = nft_ruleset(env.node)  # the winner's elements stay, the loser left none
    assert chain_name(winner["name"], "cid-a", "eth0") in text, text
    assert chain_name(winner["name"], "cid-b", "eth0") not in text, text
    env.run("portmap", "CHECK", winner, "cid-a", pod1).ok()
    env.run("portmap", "DEL", env.portmap_conf(prev, MAPPINGS[:1]), "cid-b", pod2).ok()
    env.run("portmap", "CHECK", winner, "cid-a", pod1).ok()


def udp_flows(node: Namespace, direction: str, address: str) -> list[str]:
    """The node's UDP conntrack entries whose ``direction`` (orig or reply) source is
    ``address``, as conntrack(8) lists them."""
    out = node.run("conntrack", "-L", "-p", "udp", f"--{direction}-src", address, check=False)
    return [line for line in out.stdout.splitlines() if line.startswith("udp")]


@pytest.mark.parametrize("backend", ["nftables", "iptables"])
def test_del_forgets_the_pods_udp_flows(
    backend: str,
    env_factory: Callable[..., Env],
    pod_factory: Callable[[], Namespace],
    servers: Callable[[Namespace, str], None],
) -> None:
    """upstream #1190: after DEL no UDP conntrack entry of the pod's address is left (a flow
    to its host port stays pinned to that address until it times out otherwise); another
    pod's flows stay."""
    env = env_factory(backend=backend)
    pod1, pod2 = pod_factory(), pod_factory()
    udp = [{"hostPort": 8081, "containerPort": 81, "protocol": "udp"}]
    prev1 = env.add("cid-ct1", pod1, udp)
    prev2 = env.add("cid-ct2", pod2, [{"hostPort": 8082, "containerPort": 81, "protocol": "udp"}])
    servers(pod1, "ct1")
    servers(pod2, "ct2")
    ip1, ip2 = pod_ip(prev1, 4), pod_ip(prev2, 4)
    assert fetch(env.outside, "udp", NODE_UP4, 8081) == "udp-ct1"  # DNATed to pod1
    assert fetch(env.outside, "udp", NODE_UP4, 8082) == "udp-ct2"
    fetch(pod1, "udp", OUTSIDE4, 9, attempts=1)  # pod1's own flow out (nothing answers)
    assert udp_flows(env.node, "reply", ip1) and udp_flows(env.node, "orig", ip1)
    assert udp_flows(env.node, "reply", ip2)
    env.delete("cid-ct1", udp)
    assert udp_flows(env.node, "reply", ip1) == []
    assert udp_flows(env.node, "orig", ip1) == []
    assert udp_flows(env.node, "reply", ip2), "another pod's flows must stay"
