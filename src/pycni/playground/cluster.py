"""A whole cluster on one machine: `pycni cluster up`, `down`, and what `status` reads.

Layout (names start with the prefix, default ``pycni-cl-``)::

    underlay   bridge br0 10.99.0.1/24, etcd listening on 10.99.0.1:2379
      |-- n1 ~ eth0  node1  10.99.0.11  agent, cni0, pods node1-pod1..M
      |-- n2 ~ eth0  node2  10.99.0.12  agent, cni0, pods node2-pod1..M
      ...

Every node namespace runs its own ``pycni agent`` process; pods are attached exactly as a
runtime would: ``CNIConfig.add_network_list`` exec'ing the installed entry points with a
``flannel`` config, from inside the node namespace. Everything ``down`` needs (pids,
namespaces, paths) is in ``cluster.json`` in the state directory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pycni.cluster import subnet as sn
from pycni.cluster.etcd import Etcd
from pycni.entrypoints import install
from pycni.fsutil import write_atomic
from pycni.net import addr, link, owned_routes
from pycni.net.netlink.client import rtnl
from pycni.net.ns import NetNS
from pycni.playground import add_namespace, alive, cmdline, netns_path, remove_namespaces, run_ip
from pycni.record import asdict, field, record
from pycni.runtime.api import CNIConfig
from pycni.runtime.types import RuntimeConf
from pycni.spec.conf import conf_list_from_bytes
from pycni.spec.errors import CNIError

DEFAULT_PREFIX = "pycni-cl-"
DEFAULT_NETWORK = "10.244.0.0/16"
DEFAULT_UNDERLAY = "10.99.0.0/24"
DEFAULT_IPV6_NETWORK = "fd10:244::/56"
DEFAULT_UNDERLAY6 = "fd99::/64"
FAMILIES = ("ipv4", "dual", "ipv6")
STATE_FILE = "cluster.json"
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
NETWORK_NAME = "pycni-cluster"
POD_IFNAME = "eth0"
NODE_IFNAME = "eth0"
BRIDGE = "cni0"
UNDERLAY_BRIDGE_MAC = "02:70:63:6e:69:01"
ETCD_PREFIX = "/pycni.dev/network"
AGENT_MARKER = "pycni.cli.agent_cmd"

Progress = Callable[[str], None]


class ClusterError(RuntimeError):
    """The cluster could not be set up (the message says what to do)."""


@record
class NodeState:
    name: str  # the node's namespace
    address: str  # its underlay address (IPv4; IPv6 on an IPv6-only cluster)
    dir: str
    agent_pid: int | None = None
    address6: str = ""  # its IPv6 underlay address, when the cluster has IPv6

    @property
    def subnet_file(self) -> str:
        return os.path.join(self.dir, "subnet.env")

    @property
    def conflist(self) -> str:
        return os.path.join(self.dir, "net.d", "10-pycni-cluster.conflist")

    @property
    def cache_dir(self) -> str:
        return os.path.join(self.dir, "cache")

    @property
    def agent_log(self) -> str:
        return os.path.join(self.dir, "agent.log")

    def subnet(self) -> str:
        """The node's subnet (IPv4 first), "" until the agent wrote its subnet file."""
        found = self.subnets()
        return found[0] if found else ""

    def subnets(self) -> list[str]:
        """Every subnet of the node, IPv4 first."""
        try:
            return [str(s) for _n, s in sn.read_subnet_env(self.subnet_file).pairs]
        except (OSError, sn.SubnetError):
            return []


@record
class PodState:
    name: str  # namespace and container ID
    node: str
    address: str = ""  # the first address (IPv4 on a dual-stack cluster)
    error: str = ""
    address6: str = ""  # the IPv6 address on a dual-stack or IPv6-only cluster


@record
class ClusterState:
    root: str
    prefix: str = DEFAULT_PREFIX
    backend: str = "vxlan"
    network: str = DEFAULT_NETWORK
    subnet_len: int = 24
    underlay: str = DEFAULT_UNDERLAY
    ttl: int = 60
    reconcile_interval: float = 10.0
    plugin_dir: str = ""
    etcd_pid: int | None = None
    family: str = "ipv4"  # "ipv4", "dual" or "ipv6"
    ipv6_network: str = DEFAULT_IPV6_NETWORK
    ipv6_subnet_len: int = 64
    underlay6: str = DEFAULT_UNDERLAY6
    nodes: list[NodeState] = field(default_factory=list)
    pods: list[PodState] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # namespaces made, in order
    plugin_timeout: float = 60.0  # seconds one CNI call may take (a slow machine: more)

    @property
    def underlay_ns(self) -> str:
        return f"{self.prefix}underlay"

    @property
    def underlay_gateway(self) -> ipaddress.IPv4Interface:
        net = ipaddress.IPv4Network(self.underlay)
        return ipaddress.IPv4Interface((int(net.network_address) + 1, net.prefixlen))

    @property
    def underlay_gateway6(self) -> ipaddress.IPv6Interface:
        net = ipaddress.IPv6Network(self.underlay6)
        return ipaddress.IPv6Interface((int(net.network_address) + 1, net.prefixlen))

    @property
    def has_v4(self) -> bool:
        return self.family != "ipv6"

    @property
    def has_v6(self) -> bool:
        return self.family != "ipv4"

    @property
    def etcd_host(self) -> str:
        """How etcd's address appears in a URL (bracketed on an IPv6-only cluster)."""
        if self.has_v4:
            return str(self.underlay_gateway.ip)
        return f"[{self.underlay_gateway6.ip}]"

    @property
    def etcd_endpoint(self) -> str:
        return f"http://{self.etcd_host}:{ETCD_CLIENT_PORT}"

    def etcd(self) -> Etcd:
        """A client that reaches etcd from inside the underlay namespace."""
        return Etcd(self.etcd_endpoint, netns=netns_path(self.underlay_ns), timeout=3.0)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def save(self) -> None:
        body = json.dumps(asdict(self), indent=2)
        write_atomic(self.path(STATE_FILE), body, mode=0o644, fsync=False, make_dirs=False)

    @classmethod
    def load(cls, root: str) -> ClusterState:
        with open(os.path.join(root, STATE_FILE), encoding="utf-8") as f:
            data = json.load(f)
        data["nodes"] = [NodeState(**n) for n in data.get("nodes", [])]
        data["pods"] = [PodState(**p) for p in data.get("pods", [])]
        return cls(**data)

    def node(self, name_or_index: str | int) -> NodeState:
        if isinstance(name_or_index, int):
            return self.nodes[name_or_index]
        for node in self.nodes:
            if name_or_index in (node.name, node.name.removeprefix(self.prefix)):
                return node
        raise ClusterError(f"no node {name_or_index!r} in this cluster")


def _ip(*argv: str) -> None:
    run_ip(argv, ClusterError)


@contextlib.contextmanager
def inside(name: str) -> Iterator[None]:
    """Run the block on this thread in namespace ``name``."""
    with NetNS.open(netns_path(name)) as ns, ns.entered():
        yield


# --- processes ----------------------------------------------------------------------------------


def _spawn_in(namespace: str, argv: list[str], log_path: str) -> int:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            ["nsenter", f"--net={netns_path(namespace)}", "--", *argv],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def _stop(pid: int | None, marker: str, *, hard: bool = False, wait: float = 10.0) -> None:
    """Stop our process ``pid`` (only if its command line still carries ``marker``)."""
    if pid is None or marker.encode() not in cmdline(pid):
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def agent_running(node: NodeState) -> bool:
    return (
        node.agent_pid is not None
        and alive(node.agent_pid)
        and node.subnet_file.encode() in cmdline(node.agent_pid)
    )


# --- pieces of `up` -----------------------------------------------------------------------------


def _new_namespace(state: ClusterState, name: str) -> None:
    if os.path.exists(netns_path(name)):
        raise ClusterError(
            f"namespace {name} already exists: a cluster is still up "
            "(remove it with `pycni cluster down`)"
        )
    add_namespace(name, state.created, state.save, ClusterError)


def build_underlay(state: ClusterState, count: int) -> None:
    if count + 11 > ipaddress.IPv4Network(state.underlay).num_addresses - 1:
        raise ClusterError(f"underlay {state.underlay} is too small for {count} nodes")
    _new_namespace(state, state.underlay_ns)
    gw = state.underlay_gateway
    # A fixed MAC: a bridge otherwise takes its lowest port's, so nodes joining or leaving
    # would change it under every node's ARP cache and cut them off etcd for a while.
    _ip(
        "-n", state.underlay_ns, "link", "add", "name", "br0",
        "address", UNDERLAY_BRIDGE_MAC, "type", "bridge",
    )  # fmt: skip
    if state.has_v4:
        _ip("-n", state.underlay_ns, "addr", "add", str(gw), "dev", "br0")
    if state.has_v6:
        gw6 = str(state.underlay_gateway6)
        _ip("-n", state.underlay_ns, "addr", "add", gw6, "dev", "br0", "nodad")
    _ip("-n", state.underlay_ns, "link", "set", "br0", "up")
    for _ in range(count):
        add_node(state)


def add_node(state: ClusterState) -> NodeState:
    """One more node namespace on the underlay bridge (its agent is not started)."""
    net = ipaddress.IPv4Network(state.underlay)
    i = len(state.nodes) + 1
    if i + 11 > net.num_addresses - 1:
        raise ClusterError(f"underlay {state.underlay} is too small for {i} nodes")
    gw = state.underlay_gateway
    name = f"{state.prefix}node{i}"
    address = ipaddress.IPv4Interface((int(net.network_address) + 10 + i, net.prefixlen))
    net6 = ipaddress.IPv6Network(state.underlay6)
    address6 = ipaddress.IPv6Interface((int(net6.network_address) + 16 + i, net6.prefixlen))
    node = NodeState(
        name,
        str(address.ip) if state.has_v4 else str(address6.ip),
        state.path(f"node{i}"),
        address6=str(address6.ip) if state.has_v6 else "",
    )
    os.makedirs(os.path.join(node.dir, "net.d"), exist_ok=True)
    _new_namespace(state, name)
    state.nodes.append(node)
    port = f"n{i}"
    _ip(
        "-n", state.underlay_ns, "link", "add", port, "type", "veth",
        "peer", "name", NODE_IFNAME, "netns", name,
    )  # fmt: skip
    _ip("-n", state.underlay_ns, "link", "set", port, "master", "br0", "up")
    if state.has_v4:
        _ip("-n", name, "addr", "add", str(address), "dev", NODE_IFNAME)
    if state.has_v6:
        _ip("-n", name, "addr", "add", str(address6), "dev", NODE_IFNAME, "nodad")
    _ip("-n", name, "link", "set", NODE_IFNAME, "up")
    if state.has_v4:
        _ip("-n", name, "route", "add", "default", "via", str(gw.ip))
    if state.has_v6:
        _ip("-n", name, "-6", "route", "add", "default", "via", str(state.underlay_gateway6.ip))
    state.save()
    return node


def start_etcd(state: ClusterState, timeout: float = 30.0) -> None:
    """Start etcd in the underlay (again: it keeps its data dir) and wait until it answers."""
    etcd = shutil.which("etcd")
    if etcd is None:
        raise ClusterError(
            "etcd is not installed: run scripts/setup-cluster.sh "
            "(apt-get install etcd-server etcd-client)"
        )
    host = state.etcd_host
    client = f"http://{host}:{ETCD_CLIENT_PORT}"
    peer = f"http://{host}:{ETCD_PEER_PORT}"
    argv = [
        etcd,
        "--name", "pycni-cluster",
        "--data-dir", state.path("etcd"),
        "--listen-client-urls", client,
        "--advertise-client-urls", client,
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"pycni-cluster={peer}",
        "--initial-cluster-state", "new",
        "--log-level", "warn",
    ]  # fmt: skip
    state.etcd_pid = _spawn_in(state.underlay_ns, argv, state.path("etcd.log"))
    state.save()
    client_api = state.etcd()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client_api.healthy():
            return
        if not alive(state.etcd_pid):
            break
        time.sleep(0.1)
    raise ClusterError(f"etcd did not come up; see {state.path('etcd.log')}")


def stop_etcd(state: ClusterState, *, hard: bool = False) -> None:
    """Stop etcd (``hard``: SIGKILL, as a crash would); its data dir stays."""
    _stop(state.etcd_pid, "etcd", hard=hard)
    state.etcd_pid = None
    state.save()


def _agent_argv(state: ClusterState, node: NodeState) -> list[str]:
    networks = []
    if state.has_v4:
        networks += ["--network", state.network, "--subnet-len", str(state.subnet_len)]
    if state.has_v6:
        networks += [
            "--ipv6-network", state.ipv6_network,
            "--ipv6-subnet-len", str(state.ipv6_subnet_len),
        ]  # fmt: skip
    return [
        sys.executable, "-m", AGENT_MARKER,
        "--etcd-endpoints", state.etcd_endpoint,
        "--etcd-prefix", ETCD_PREFIX,
        *networks,
        "--backend", state.backend,
        "--iface", NODE_IFNAME,
        "--subnet-file", node.subnet_file,
        "--ttl", str(state.ttl),
        "--reconcile-interval", str(state.reconcile_interval),
        *(["--wireguard-key-file", os.path.join(node.dir, "wgkey"), "--wireguard-keepalive",
           "25"] if state.backend == "wireguard" else []),
    ]  # fmt: skip


def start_agent(state: ClusterState, node: NodeState) -> int:
    """Start ``node``'s agent inside its namespace; returns its pid."""
    node.agent_pid = _spawn_in(node.name, _agent_argv(state, node), node.agent_log)
    state.save()
    return node.agent_pid


def stop_agent(state: ClusterState, node: NodeState, *, hard: bool = False) -> None:
    """Stop ``node``'s agent (``hard``: SIGKILL, as a crash would)."""
    _stop(node.agent_pid, node.subnet_file, hard=hard)
    node.agent_pid = None
    state.save()


def _wait_for_subnet(node: NodeState, timeout: float = 30.0) -> str:
    """Wait until the agent wrote its subnet file; returns the subnet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = node.subnet()
        if found:
            return found
        if node.agent_pid is not None and not alive(node.agent_pid):
            break
        time.sleep(0.05)
    raise ClusterError(f"the agent of {node.name} wrote no subnet file; see {node.agent_log}")


def node_routes(node: NodeState) -> dict[str, str]:
    """The agent's routes in ``node`` (both families): destination → gateway."""
    with inside(node.name), rtnl() as kernel:
        routes = {**owned_routes.current(kernel)}
        routes.update(owned_routes.current(kernel, family=owned_routes.AF_INET6))
        return {str(d): str(r.gateway) for d, r in routes.items()}


def wait_converged(state: ClusterState, timeout: float = 30.0) -> None:
    """Wait until every node routes to every other node's subnet."""
    deadline = time.monotonic() + timeout
    subnets = {n.name: n.subnets() for n in state.nodes}
    missing: list[str] = []
    while time.monotonic() < deadline:
        missing = []
        for node in state.nodes:
            routes = node_routes(node)
            missing += [
                f"{node.name} -> {s}"
                for other, mine in subnets.items()
                for s in mine
                if other != node.name and s not in routes
            ]
        if not missing:
            return
        time.sleep(0.1)
    raise ClusterError(f"routes still missing after {timeout:.0f}s: {', '.join(missing)}")


def conflist(state: ClusterState, node: NodeState) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "flannel",
                "subnetFile": node.subnet_file,
                "dataDir": os.path.join(node.dir, "flannel"),
                "ipam": {"dataDir": os.path.join(node.dir, "ipam")},
                "delegate": {"bridge": BRIDGE, "hairpinMode": True, "isDefaultGateway": True},
            }
        ],
    }


def _install_plugins(state: ClusterState) -> None:
    state.plugin_dir = state.path("bin")
    install.install(state.plugin_dir, form="inprocess")
    state.save()


def _runtime(state: ClusterState, node: NodeState) -> Any:
    return CNIConfig([state.plugin_dir], cache_dir=node.cache_dir, timeout=state.plugin_timeout)


def _rt(pod: PodState) -> Any:
    return RuntimeConf(container_id=pod.name, netns=netns_path(pod.name), ifname=POD_IFNAME)


def _load_conf(node: NodeState) -> Any:
    with open(node.conflist, "rb") as f:
        return conf_list_from_bytes(f.read())


def _attach_node(state: ClusterState, node: NodeState, pods: list[PodState]) -> None:
    with open(node.conflist, "w", encoding="utf-8") as f:
        json.dump(conflist(state, node), f, indent=2)
    conf = _load_conf(node)
    cni = _runtime(state, node)
    with inside(node.name):
        for pod in pods:
            try:
                result = cni.add_network_list(conf, _rt(pod))
                addresses = [str(ip.address.ip) for ip in result.ips]
                pod.address = addresses[0] if addresses else ""
                pod.address6 = next((a for a in addresses if ":" in a), "")
            except CNIError as err:
                pod.error = str(err)


def _attach_pods(state: ClusterState, per_node: int, progress: Progress) -> None:
    _install_plugins(state)
    progress(f"plugins installed in {state.plugin_dir}")
    by_node: dict[str, list[PodState]] = {}
    for node in state.nodes:
        pods = [PodState(f"{node.name}-pod{j}", node.name) for j in range(1, per_node + 1)]
        for pod in pods:
            _new_namespace(state, pod.name)
        state.pods += pods
        by_node[node.name] = pods
    state.save()
    with ThreadPoolExecutor(max_workers=max(len(state.nodes), 1)) as pool:
        futures = [pool.submit(_attach_node, state, n, by_node[n.name]) for n in state.nodes]
        for future in futures:
            future.result()
    state.save()
    for pod in state.pods:
        shown = " ".join(a for a in dict.fromkeys((pod.address, pod.address6)) if a)
        progress(f"pod {pod.name} on {pod.node}: {shown or 'FAILED: ' + pod.error}")
    failed = [p for p in state.pods if p.error]
    if failed:
        raise ClusterError(f"ADD failed for {failed[0].name}: {failed[0].error}")
    if state.has_v6:
        _settle_bridges(state)


def _settle_bridges(state: ClusterState) -> None:
    """Wait until each node's bridge has finished DAD for its IPv6 gateway address: until
    then the node answers no neighbour solicitation for it and pods' IPv6 goes nowhere."""
    for node in state.nodes:
        with inside(node.name), rtnl() as kernel:
            try:
                index = link.index_of(kernel, BRIDGE)
            except link.LinkNotFound:  # no pod on this node: no bridge
                continue
            try:
                addr.wait_dad(kernel, BRIDGE, index, timeout=10.0)
            except addr.AddressError as exc:
                raise ClusterError(f"{node.name}: {exc}") from None


# --- up / down ----------------------------------------------------------------------------------


@record
class UpOptions:
    nodes: int = 3
    pods_per_node: int = 2
    backend: str = "vxlan"
    network: str = DEFAULT_NETWORK
    subnet_len: int = 24
    underlay: str = DEFAULT_UNDERLAY
    ttl: int = 60
    reconcile_interval: float = 10.0
    family: str = "ipv4"  # "ipv4", "dual" (--dual-stack) or "ipv6" (--ipv6-only)
    ipv6_network: str = DEFAULT_IPV6_NETWORK
    ipv6_subnet_len: int = 64
    wait: float = 30.0  # seconds for each agent's lease and for the routes (slow machines: more)


def new_state(root: str, prefix: str) -> ClusterState:
    if os.path.exists(os.path.join(root, STATE_FILE)):
        raise ClusterError(f"a cluster is already up (state in {root}): `pycni cluster down` first")
    return ClusterState(root=root, prefix=prefix)


def up(state: ClusterState, opts: UpOptions, progress: Progress) -> ClusterState:
    """Build the cluster described by ``opts``; leaves it running (``down`` removes it)."""
    if opts.nodes < 1 or opts.pods_per_node < 0:
        raise ClusterError("--nodes must be at least 1 and --pods-per-node at least 0")
    if opts.family not in FAMILIES:
        raise ClusterError(f"family {opts.family!r} is not one of {', '.join(FAMILIES)}")
    try:
        networks = []
        if opts.family != "ipv6":
            networks.append(sn.NetworkConfig.parse(opts.network, opts.subnet_len))
        if opts.family != "ipv4":
            networks.append(
                sn.NetworkConfig.parse(opts.ipv6_network, opts.ipv6_subnet_len, version=6)
            )
        for network in networks:
            if network.count_in_network() - 1 < opts.nodes:
                raise ClusterError(
                    f"{network.network} has too few /{network.subnet_len}s for {opts.nodes} nodes"
                )
    except sn.SubnetError as exc:
        raise ClusterError(str(exc)) from None
    os.makedirs(state.root, mode=0o700, exist_ok=True)
    state.backend, state.network, state.subnet_len = opts.backend, opts.network, opts.subnet_len
    state.underlay, state.ttl = opts.underlay, opts.ttl
    state.reconcile_interval = opts.reconcile_interval
    state.family, state.ipv6_network = opts.family, opts.ipv6_network
    state.ipv6_subnet_len = opts.ipv6_subnet_len
    state.plugin_timeout = max(60.0, opts.wait)
    state.save()
    build_underlay(state, opts.nodes)
    shown = " ".join(
        [str(state.underlay_gateway)] * state.has_v4 + [str(state.underlay_gateway6)] * state.has_v6
    )
    progress(f"underlay {state.underlay_ns} (br0 {shown}) and {opts.nodes} nodes")
    start_etcd(state, timeout=opts.wait)
    progress(f"etcd up at {state.etcd_endpoint} inside {state.underlay_ns} (pid {state.etcd_pid})")
    for node in state.nodes:
        start_agent(state, node)
    for node in state.nodes:
        _wait_for_subnet(node, timeout=opts.wait)
        progress(f"agent on {node.name} ({node.address}) leased {' '.join(node.subnets())}")
    wait_converged(state, timeout=max(opts.wait, opts.nodes * 0.6))  # 100 agents share CPUs
    progress(f"{opts.backend} routes between all {opts.nodes} nodes in place")
    if opts.pods_per_node:
        _attach_pods(state, opts.pods_per_node, progress)
    return state


def _detach(state: ClusterState) -> list[str]:
    problems: list[str] = []
    if not state.plugin_dir or not os.path.isdir(state.plugin_dir):
        return problems
    for node in state.nodes:
        pods = [p for p in state.pods if p.node == node.name]
        if not pods or not os.path.exists(node.conflist):
            continue
        if not os.path.exists(netns_path(node.name)):
            continue
        try:
            conf = _load_conf(node)
        except (OSError, ValueError) as exc:
            problems.append(f"{node.conflist}: {exc}")
            continue
        cni = _runtime(state, node)
        with inside(node.name):
            for pod in pods:
                try:
                    cni.del_network_list(conf, _rt(pod))
                except CNIError as err:
                    problems.append(f"DEL {pod.name}: {err}")
    return problems


def down(state: ClusterState, progress: Progress | None = None) -> list[str]:
    """Remove everything ``up`` made, even a half-made cluster; returns the problems seen."""
    say = progress or (lambda _m: None)
    problems: list[str] = []
    for node in state.nodes:
        _stop(node.agent_pid, node.subnet_file)
    say("agents stopped")
    try:
        problems += _detach(state)
    except Exception as exc:  # a broken runtime must not keep the namespaces alive
        problems.append(f"DEL failed: {exc}")
    if state.pods:
        say(f"{len(state.pods)} pods detached")
    _stop(state.etcd_pid, "etcd")
    say("etcd stopped")
    problems += remove_namespaces(state.created, ClusterError)
    say(f"{len(state.created)} namespaces removed")
    shutil.rmtree(state.root, ignore_errors=True)
    return problems
