"""The agent does not believe etcd blindly, and reaches it the way a real cluster exposes it.

A small cluster (an underlay bridge, two node namespaces) is built with `pycni cluster`'s
pieces; etcd is started here in each configuration under test:

- TLS only, with client-certificate authentication; TLS with username/password (the
  certificates are made by openssl in the test): agents lease and route, clients without
  the right credentials are refused;
- three members, the one every agent uses killed: leases are renewed and new leases
  routed through the others;
- hostile leases (the default route, a piece of the node's subnet, a wrong prefix length,
  a route that is not the agent's, a garbage VtepMAC and PublicIP, a 10 MiB value): each
  is ignored with a log line, every route of the node that is not the agent's stays
  byte-identical, and legitimate peers go on being routed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pycni import playground
from pycni.cluster.etcd import Etcd, EtcdCredentials, EtcdError
from pycni.cluster.lease import LeaseInfo, LeaseStore
from pycni.cluster.subnet import read_subnet_env
from pycni.playground import cluster
from tests import harness
from tests.integration.cluster_helpers import MARKS, PYCNI, wait_for

pytestmark = MARKS

TTL = 3
RECONCILE = 1.0
NETWORK = "10.244.0.0/16"
MEMBER_IPS = ("10.99.0.1", "10.99.0.2", "10.99.0.3")
PREFIX = cluster.ETCD_PREFIX


def _openssl(*argv: str, cwd: Path) -> None:
    subprocess.run(["openssl", *argv], cwd=cwd, check=True, capture_output=True)


def _issue(ca: str, name: str, cn: str, ext: str, cwd: Path) -> None:
    """An EC key and a certificate for ``cn`` signed by ``ca`` with extensions ``ext``."""
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd,
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(ext)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


def _ca(name: str, cwd: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "1",
        "-subj", f"/CN={name}", cwd=cwd,
    )  # fmt: skip


@dataclass
class Pki:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, etcd's server certificate (the member addresses), a client certificate for
    user root, and a second CA nobody trusts."""
    d = tmp_path_factory.mktemp("pki")
    _ca("ca", d)
    _ca("rogue", d)
    sans = ",".join(f"IP:{ip}" for ip in MEMBER_IPS)
    # clientAuth too: etcd's JSON gateway connects to its own member with this certificate
    _issue(
        "ca",
        "server",
        "etcd",
        f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n",
        d,
    )
    _issue("ca", "client", "root", "extendedKeyUsage=clientAuth\n", d)
    _issue("rogue", "rogue-client", "root", "extendedKeyUsage=clientAuth\n", d)
    return Pki(d)


class Bed:
    """An underlay and two node namespaces; etcd members and agents started per test."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.state = cluster.ClusterState(root=str(root), prefix=prefix, ttl=TTL)
        self.members: list[int] = []
        self.log_dir = root / "logs"
        self.file_of: dict[str, str] = {}  # node -> its agent's subnet file

    @property
    def underlay(self) -> str:
        return self.state.underlay_ns

    def build(self) -> None:
        os.makedirs(self.state.root, mode=0o700, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.state.save()
        cluster.build_underlay(self.state, 2)
        for ip in MEMBER_IPS[1:]:
            harness.Namespace(self.underlay).run("ip", "addr", "add", f"{ip}/24", "dev", "br0")

    def start_etcd(self, members: int, scheme: str, *extra: str) -> list[str]:
        """``members`` etcd members (fresh data) on the underlay; returns the client URLs."""
        names = [f"m{i}" for i in range(members)]
        peers = ",".join(f"{n}=http://{ip}:2380" for n, ip in zip(names, MEMBER_IPS, strict=False))
        clients = [f"{scheme}://{ip}:2379" for ip in MEMBER_IPS[:members]]
        for name, ip, client in zip(names, MEMBER_IPS, clients, strict=False):
            data = Path(self.state.root) / f"etcd-{name}"
            shutil.rmtree(data, ignore_errors=True)
            argv = [
                "etcd", "--name", name, "--data-dir", str(data),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", f"http://{ip}:2380",
                "--initial-advertise-peer-urls", f"http://{ip}:2380",
                "--initial-cluster", peers, "--initial-cluster-state", "new",
                "--log-level", "error", *extra,
            ]  # fmt: skip
            log = str(self.log_dir / f"etcd-{name}.log")
            self.members.append(cluster._spawn_in(self.underlay, argv, log))
        return clients

    def stop_etcd(self, pid: int | None = None) -> None:
        for member in [pid] if pid else list(self.members):
            if member is not None:
                cluster._stop(member, "etcd", hard=pid is not None)
                self.members.remove(member)

    def client(self, endpoints: list[str], creds: EtcdCredentials | None = None) -> Etcd:
        return Etcd(
            endpoints, netns=playground.netns_path(self.underlay), timeout=3, credentials=creds
        )

    def wait_etcd(self, etcd: Etcd) -> None:
        last: list[str] = []

        def answers() -> bool:
            try:
                etcd.call("kv/range", {"key": "eA=="})
                return True
            except EtcdError as exc:
                last[:] = [str(exc)]
                return False

        wait_for(answers, 30, "etcd to answer", lambda: f"{last}\n{self.logs('etcd')}")

    def start_agents(
        self, args: list[str], tag: str, env: dict[str, str] | None = None, backend: str = "host-gw"
    ) -> None:
        for node in self.state.nodes:
            node_file = str(Path(node.dir) / f"subnet-{tag}.env")
            argv = [
                sys.executable, "-m", cluster.AGENT_MARKER, *args,
                "--etcd-prefix", PREFIX, "--network", NETWORK, "--backend", backend,
                "--iface", "eth0", "--subnet-file", node_file, "--ttl", str(TTL),
                "--reconcile-interval", str(RECONCILE),
            ]  # fmt: skip
            log = open(self.log_dir / f"agent-{node.name}-{tag}.log", "ab")  # noqa: SIM115
            proc = subprocess.Popen(
                ["nsenter", f"--net={playground.netns_path(node.name)}", "--", *argv],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
            log.close()
            node.agent_pid = proc.pid
            self.file_of[node.name] = node_file
        self.state.save()

    def stop_agents(self) -> None:
        for node in self.state.nodes:
            if node.agent_pid:
                cluster._stop(node.agent_pid, cluster.AGENT_MARKER)
                node.agent_pid = None
        self.state.save()

    def subnets(self) -> dict[str, str]:
        out = {}
        for node in self.state.nodes:
            try:
                out[node.name] = str(read_subnet_env(self.file_of[node.name]).subnet)
            except (OSError, KeyError, ValueError):
                out[node.name] = ""
        return out

    def converged(self) -> bool:
        subnets = self.subnets()
        if not all(subnets.values()):
            return False
        for node in self.state.nodes:
            routes = cluster.node_routes(node)
            if any(s not in routes for n, s in subnets.items() if n != node.name):
                return False
        return True

    def logs(self, kind: str = "agent") -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob(f"{kind}-*.log"))
        )

    def agent_log(self, node: cluster.NodeState, tag: str) -> str:
        return (self.log_dir / f"agent-{node.name}-{tag}.log").read_text(errors="replace")

    def down(self) -> None:
        self.stop_agents()
        self.stop_etcd()
        cluster.down(self.state)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    b = Bed(tmp_path_factory.mktemp("trust") / "state", f"{harness.RUN_PREFIX}tr-")
    try:
        b.build()
        yield b
    finally:
        b.down()


@pytest.fixture
def fresh(bed: Bed) -> Iterator[Bed]:
    """The bed with no agent and no etcd left over from the previous test."""
    yield bed
    bed.stop_agents()
    bed.stop_etcd()


def _tls_args(pki: Pki, *extra: str) -> list[str]:
    """etcd serving TLS only; ``extra`` adds client certificate checks."""
    return ["--cert-file", pki.path("server.crt"), "--key-file", pki.path("server.key"), *extra]


def _refused(etcd: Etcd) -> str:
    try:
        etcd.call("kv/range", {"key": "eA=="})
    except EtcdError as exc:
        return str(exc)
    raise AssertionError(f"{etcd.endpoint} answered a client that should have been refused")


def test_tls_with_client_certificates(fresh: Bed, pki: Pki) -> None:
    [url] = fresh.start_etcd(
        1, "https", *_tls_args(pki, "--client-cert-auth", "--trusted-ca-file", pki.path("ca.crt"))
    )
    creds = EtcdCredentials(pki.path("ca.crt"), pki.path("client.crt"), pki.path("client.key"))
    fresh.wait_etcd(fresh.client([url], creds))
    fresh.start_agents(
        ["--etcd-endpoints", url, "--etcd-cafile", pki.path("ca.crt"),
         "--etcd-certfile", pki.path("client.crt"), "--etcd-keyfile", pki.path("client.key")],
        "cert",
    )  # fmt: skip
    wait_for(fresh.converged, 30, "agents over TLS to lease and route", fresh.logs)
    assert len(set(fresh.subnets().values())) == 2
    # without a client certificate, with one from another CA, over plain HTTP, or trusting
    # the wrong CA: refused
    assert _refused(fresh.client([url], EtcdCredentials(pki.path("ca.crt"))))
    rogue = EtcdCredentials(
        pki.path("ca.crt"), pki.path("rogue-client.crt"), pki.path("rogue-client.key")
    )
    assert _refused(fresh.client([url], rogue))
    assert _refused(fresh.client([url.replace("https", "http")]))
    assert "certificate verify failed" in _refused(
        fresh.client([url], EtcdCredentials(pki.path("rogue.crt")))
    )


def test_tls_with_username_and_password(fresh: Bed, pki: Pki) -> None:
    [url] = fresh.start_etcd(1, "https", *_tls_args(pki))
    ca = EtcdCredentials(pki.path("ca.crt"))
    fresh.wait_etcd(fresh.client([url], ca))
    ctl = harness.Namespace(fresh.underlay)
    etcdctl = ["etcdctl", "--endpoints", url, "--cacert", pki.path("ca.crt")]
    ctl.run(*etcdctl, "user", "add", "root:s3cret-pw")
    ctl.run(*etcdctl, "auth", "enable")
    fresh.start_agents(
        ["--etcd-endpoints", url, "--etcd-cafile", pki.path("ca.crt"),
         "--etcd-username", "root"],
        "auth",
        env={"FLANNELD_ETCD_PASSWORD": "s3cret-pw"},
    )  # fmt: skip
    wait_for(fresh.converged, 30, "agents with a password to lease and route", fresh.logs)
    node = fresh.state.nodes[0]
    assert "s3cret-pw" not in fresh.agent_log(node, "auth")
    assert b"s3cret-pw" not in playground.cmdline(node.agent_pid or 0)
    wrong = EtcdCredentials(pki.path("ca.crt"), username="root", password="wrong")
    assert "authentication failed" in _refused(fresh.client([url], wrong))
    assert _refused(fresh.client([url], ca))  # no user at all
    with pytest.raises(EtcdError, match="clear text"):
        Etcd(url.replace("https", "http"), credentials=wrong)


def test_three_members_one_killed_agents_go_on(fresh: Bed) -> None:
    urls = fresh.start_etcd(3, "http")
    etcd = fresh.client(urls[1:])
    fresh.wait_etcd(etcd)
    fresh.start_agents(["--etcd-endpoints", ",".join(urls)], "ha")
    wait_for(fresh.converged, 30, "agents on a 3-member etcd", fresh.logs)
    subnets = fresh.subnets()
    store = LeaseStore(etcd, PREFIX)
    fresh.stop_etcd(fresh.members[0])  # the first endpoint: the one every agent talks to
    killed = time.monotonic()
    # a node joining now is routed by every agent: lists and watches moved to the others
    ghost = ipaddress.IPv4Network("10.244.250.0/24")
    info = LeaseInfo(ipaddress.IPv4Address("10.99.0.250"), "host-gw")
    etcd.put(store.key(ghost), info.to_json())
    wait_for(
        lambda: all(str(ghost) in cluster.node_routes(n) for n in fresh.state.nodes),
        30,  # polled: only a loaded machine's worst case waits
        "the agents to route to a lease written after the member died",
        fresh.logs,
    )
    etcd.delete(store.key(ghost))
    # past two TTLs the leases are still the same: renewals went to the live members
    time.sleep(max(2 * TTL + 1 - (time.monotonic() - killed), 0))
    live = {str(s): str(i.public_ip) for s, (i, _kv) in store.list()[0].items()}
    assert live == {subnets[n.name]: n.address for n in fresh.state.nodes}, fresh.logs()
    assert fresh.subnets() == subnets
    assert fresh.converged()
    for node in fresh.state.nodes:
        assert "lost" not in fresh.agent_log(node, "ha")
        health = harness.Namespace(node.name).run(
            str(Path(sys.executable).parent / "pycni"), "agent", "--health",
            "--subnet-file", fresh.file_of[node.name],
        )  # fmt: skip
        assert health.stdout.startswith("ready:"), health.stdout


def _foreign_routes(ns: harness.Namespace) -> str:
    """Every route of the node in every table, both families, except the agent's own (its
    routes, and the IPv6 local-table entries the kernel keeps for its VXLAN device's
    link-local address, which come and go with DAD and are no lease's doing)."""
    out = ""
    for family in ("-4", "-6"):
        text = ns.run("ip", family, "route", "show", "table", "all").stdout
        out += "".join(
            line + "\n"
            for line in text.splitlines()
            if "proto 157" not in line
            and not (family == "-6" and "dev pycni." in line and "table local" in line)
        )
    return out


def test_hostile_leases_are_ignored_and_touch_nothing(fresh: Bed) -> None:
    [url] = fresh.start_etcd(1, "http", "--max-request-bytes", str(16 << 20))
    etcd = fresh.client([url])
    etcd.timeout = 20
    fresh.wait_etcd(etcd)
    fresh.start_agents(["--etcd-endpoints", url], "evil", backend="vxlan")
    wait_for(fresh.converged, 30, "the vxlan agents to route", fresh.logs)
    node1, node2 = fresh.state.nodes
    ns1 = harness.Namespace(node1.name)
    own = ipaddress.IPv4Network(fresh.subnets()[node1.name])
    peer = fresh.subnets()[node2.name]
    # an administrator's route where a lease will claim a subnet: it must stay as it is
    ns1.run("ip", "route", "add", "10.244.203.0/24", "via", "10.99.0.1", "proto", "static")
    # the kernel adds its IPv6 routes for the new VXLAN device once its link-local address
    # passed DAD: wait for that before taking the picture
    wait_for(
        lambda: (
            "fe80" in (a := ns1.run("ip", "-6", "addr", "show", "dev", "pycni.1").stdout)
            and "tentative" not in a
            and "ff00::/8 dev pycni.1"
            in ns1.run("ip", "-6", "route", "show", "table", "all").stdout
        ),
        15,
        "the VXLAN device's IPv6 link-local setup",
    )
    before = _foreign_routes(ns1)
    store = LeaseStore(etcd, PREFIX)
    leases = json.loads(etcd.get(store.key(ipaddress.IPv4Network(peer))).value)  # type: ignore[union-attr]
    good = {**leases, "PublicIP": "10.99.0.77"}

    def lease(**changes: object) -> bytes:
        return json.dumps({**good, **changes}).encode()

    def bd(**changes: object) -> dict[str, object]:
        return {**good["BackendData"], **changes}

    hostile = {
        "0.0.0.0-0": lease(),
        f"{own.network_address}-25": lease(),
        f"{own.network_address + 128}-25": lease(),
        "10.99.0.0-24": lease(),
        "10.244.200.0-23": lease(),
        "10.244.201.0-24": lease(BackendData=bd(VtepMAC="zz:zz:zz:zz:zz:zz")),
        "10.244.202.0-24": lease(BackendData=bd(VtepMAC="ff:ff:ff:ff:ff:ff")),
        "10.244.203.0-24": lease(),
        "10.244.204.0-24": lease(PublicIP="0.0.0.0"),
        "10.244.205.0-24": lease(PublicIP="10.99.0.0/24"),
        "10.244.206.0-24": b"not json",
        "10.244.207.0-24": lease(pad="x" * (10 << 20)),
    }
    for key, value in hostile.items():
        etcd.put(store.subnets_prefix + key, value)
    # then a legitimate node joins: once it is routed, a whole pass with all of the above
    # in etcd has run
    joined = ipaddress.IPv4Network("10.244.210.0/24")
    etcd.put(store.key(joined), lease(BackendData=bd(VtepMAC="02:00:00:00:02:10")))
    try:
        wait_for(
            lambda: str(joined) in cluster.node_routes(node1),
            20,
            "the legitimate lease to be routed",
            fresh.logs,
        )
        # the joined lease may come by a watch event before the full pass that reads the
        # 10 MiB value key by key (a list that timed out under load is retried next pass)
        wait_for(
            lambda: all(
                f"ignoring lease {store.subnets_prefix}{key}: " in fresh.agent_log(node1, "evil")
                for key in hostile
            ),
            30,
            "every hostile lease to be reported",
            lambda: fresh.agent_log(node1, "evil")[-4000:],
        )
        log = fresh.agent_log(node1, "evil")
        assert "value over" in log
        assert log.count("ignoring lease") == len(hostile)  # once each, not every pass
        assert _foreign_routes(ns1).splitlines() == before.splitlines()
        routes = cluster.node_routes(node1)
        assert set(routes) == {peer, str(joined)}, routes
        assert str(own) not in routes
        neigh = ns1.run("ip", "neigh", "show", "dev", "pycni.1").stdout
        assert "ff:ff:ff:ff:ff:ff" not in neigh and "10.244.201.0" not in neigh
        # the real peer is still reachable through the overlay
        assert ns1.ping(peer.split("/")[0])
        assert fresh.converged()
        assert all(n.agent_pid and playground.alive(n.agent_pid) for n in fresh.state.nodes)
    finally:
        for key in [*hostile, "10.244.210.0-24"]:
            etcd.delete(store.subnets_prefix + key)
        ns1.run("ip", "route", "del", "10.244.203.0/24", "proto", "static")


def _health(bed: Bed, node: cluster.NodeState) -> str:
    argv = [PYCNI, "agent", "--health", "--subnet-file", bed.file_of[node.name]]
    return harness.Namespace(node.name).run(*argv, check=False).stdout


def _status(bed: Bed, node: cluster.NodeState, cni_path: str) -> harness.PluginRun:
    config = {
        "cniVersion": "1.1.0",
        "name": "trust",
        "type": "flannel",
        "subnetFile": bed.file_of[node.name],
    }
    with harness.Namespace(node.name).entered():
        return harness.exec_plugin(Path(cni_path) / "flannel", "STATUS", config, cni_path=cni_path)


def test_not_ready_until_the_agent_has_its_lease(fresh: Bed, cni_path: str) -> None:
    """Agents started before etcd: the node says not ready (STATUS 50, --health) until its
    agent leased a subnet and programmed its routes, then ready."""
    url = f"http://{MEMBER_IPS[0]}:2379"
    fresh.start_agents(["--etcd-endpoints", url], "ready")
    node = fresh.state.nodes[0]
    wait_for(lambda: "waiting for etcd" in fresh.agent_log(node, "ready"), 20, "the agent to wait")
    assert _health(fresh, node).startswith("not ready: no subnet file")
    status = _status(fresh, node, cni_path)
    assert status.code == 1 and status.json["code"] == 50, status.stdout
    fresh.start_etcd(1, "http")
    wait_for(fresh.converged, 30, "the agents to lease and route", fresh.logs)
    assert _health(fresh, node).startswith("ready: node subnet ")
    assert _status(fresh, node, cni_path).code == 0
    log = fresh.agent_log(node, "ready")
    assert log.index("ready: subnet file") > log.index("leased ")
