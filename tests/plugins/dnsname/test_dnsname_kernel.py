"""dnsname against the Go reference (dnsname 1.3.1) on a real bridge in a node namespace.

Both implementations get the same prevResults (from the Go bridge plugin) and their state goes
under a per-test ``XDG_RUNTIME_DIR`` (the reference's own rule for its base dir), so nothing is
written to /run/containers. Names are resolved from a pod with busybox's nslookup against the
dnsmasq each implementation started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pycni.runtime import CNIConfig, RuntimeConf, conf_list_from_bytes
from tests import harness

pytestmark = pytest.mark.kernel

GO_DNSNAME = Path("/usr/lib/cni/dnsname")
NETWORK = "dnsnet"
BRIDGE = "cnidns0"
# per run: the leak scan of `pycni inspect` looks into every namespace of the machine, where
# another run of this file (a shared machine) would hold the same pod addresses
SUBNET = f"10.197.{os.getpid() % 250 + 1}"
GATEWAY = f"{SUBNET}.1"
DOMAIN = "dns.podman"


def wait_exited(pids: list[int], timeout: float = 15) -> None:
    """Until each pid is gone or a zombie. A dying process loses its command line before it
    closes its sockets, so "no dnsmasq in the process list" alone can still hold port 53."""

    def exiting(pid: int) -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]

    deadline = time.monotonic() + timeout
    while any(exiting(p) for p in pids):
        assert time.monotonic() < deadline, f"dnsmasq {pids} did not exit"
        time.sleep(0.02)


def dnsmasq_pids(marker: str) -> list[int]:
    """Live dnsmasq processes whose command line mentions ``marker`` (a test's tmp dir)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]:
            continue
        if argv and argv[0].endswith(b"dnsmasq") and any(marker.encode() in a for a in argv):
            out.append(int(entry))
    return out


def cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def resolve(pod: harness.Namespace, name: str, server: str = GATEWAY) -> list[str]:
    """IPv4 addresses busybox nslookup gets for ``name`` from ``server`` ([] when none)."""
    proc = pod.run("busybox", "nslookup", "-type=a", name, server, check=False, timeout=20)
    found, out = False, []
    for line in proc.stdout.splitlines():
        if line.startswith("Name:"):
            found = True
        elif found and line.startswith("Address:"):
            out.append(line.split()[-1])
    return out


def wait_resolves(
    pod: harness.Namespace,
    name: str,
    expected: list[str],
    server: str = GATEWAY,
    timeout: float = 15,
) -> list[str]:
    """dnsmasq rereads its hosts file on SIGHUP asynchronously: poll until it answers."""
    deadline = time.monotonic() + timeout
    while True:
        got = resolve(pod, name, server)
        if sorted(got) == sorted(expected) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


@dataclass
class Net:
    """A bridge network in the node with pods attached by the Go bridge plugin."""

    node: harness.Namespace
    state: harness.State
    pods: list[harness.Namespace] = field(default_factory=list)
    prev: list[dict[str, Any]] = field(default_factory=list)
    ranges: list[list[dict[str, str]]] = field(
        default_factory=lambda: [[{"subnet": f"{SUBNET}.0/24", "gateway": GATEWAY}]]
    )

    def bridge_conf(self) -> dict[str, Any]:
        return {
            "cniVersion": "0.4.0",
            "name": NETWORK,
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipam": {
                "type": "host-local",
                "dataDir": str(self.state.data_dir),
                "ranges": self.ranges,
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        }

    def attach(self, pod: harness.Namespace) -> None:
        cid = f"c{len(self.pods)}"
        with self.node.entered():
            run = harness.exec_plugin(
                "/usr/lib/cni/bridge",
                "ADD",
                self.bridge_conf(),
                container_id=cid,
                netns=pod.path,
                cni_path="/usr/lib/cni",
            ).ok()
        self.pods.append(pod)
        self.prev.append(run.json)

    def ip(self, i: int) -> str:
        return str(self.prev[i]["ips"][0]["address"]).split("/")[0]


@pytest.fixture
def net(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    tmp_state: harness.State,
) -> Iterator[Net]:
    n = Net(node, tmp_state)
    for _ in range(3):
        n.attach(pod_factory())
    yield n
    for pid in dnsmasq_pids(str(tmp_state.root)):  # only ones this test started
        os.kill(pid, signal.SIGKILL)


@dataclass
class Impl:
    """One dnsname implementation with its own runtime dir."""

    binary: Path
    xdg: Path
    net: Net

    @property
    def base(self) -> Path:
        return self.xdg / "containers" / "cni" / "dnsname"

    def call(
        self,
        command: str,
        i: int,
        name: str | None,
        aliases: list[str] | None = None,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        version: str = "0.4.0",
    ) -> harness.PluginRun:
        conf: dict[str, Any] = {
            "cniVersion": version,
            "name": NETWORK,
            "type": "dnsname",
            "domainName": DOMAIN,
            "capabilities": {"aliases": True},
            **(extra or {}),
        }
        if aliases is not None:
            conf["runtimeConfig"] = {"aliases": {NETWORK: aliases, "othernet": ["x"]}}
        if command in ("ADD", "CHECK", "DEL") and "prevResult" not in conf:
            conf["prevResult"] = self.net.prev[i]
        args = "IgnoreUnknown=1" + (f";K8S_POD_NAME={name}" if name else "")
        with self.net.node.entered():
            return harness.exec_plugin(
                self.binary,
                command,
                conf,
                container_id=f"c{i}",
                netns=self.net.pods[i].path,
                cni_path=str(self.binary.parent),
                cni_args=args,
                extra_env={"XDG_RUNTIME_DIR": str(self.xdg), **(env or {})},
            )

    def snapshot(self) -> dict[str, tuple[str, str]]:
        """Every file and directory under the runtime dir: mode and content (pids masked)."""
        out: dict[str, tuple[str, str]] = {}
        root = self.xdg / "containers"
        for path in sorted(root.rglob("*")) if root.exists() else []:
            rel = str(path.relative_to(self.xdg))
            if "dnsname-pycni" in rel:
                continue
            mode = oct(path.stat().st_mode & 0o7777)
            if path.is_dir():
                out[rel + "/"] = (mode, "")
            elif path.name == "pidfile":
                out[rel] = (mode, "<pid>" if path.read_text().strip().isdigit() else "?")
            else:
                out[rel] = (mode, path.read_text().replace(str(self.xdg), "$XDG"))
        return out

    def dnsmasq(self) -> list[int]:
        return dnsmasq_pids(str(self.xdg))

    def masked_cmdline(self) -> list[str]:
        (pid,) = self.dnsmasq()
        return [a.replace(str(self.xdg), "$XDG") for a in cmdline(pid)]


def accept_rules(node: harness.Namespace) -> list[str]:
    saved = node.run("iptables-save", "-t", "filter").stdout
    return [line for line in saved.splitlines() if "--dport 53" in line]


def lifecycle(impl: Impl) -> dict[str, Any]:
    """ADD two named pods, resolve, DEL them one by one; what was seen at each step."""
    pods = impl.net.pods
    seen: dict[str, Any] = {}
    seen["add0"] = impl.call("ADD", 0, "web", ["www", "front"]).ok().json
    seen["add1"] = impl.call("ADD", 1, "db", []).ok().json
    seen["files_up"] = impl.snapshot()
    seen["cmdline"] = impl.masked_cmdline()
    seen["rules_up"] = accept_rules(impl.net.node)
    for name in ("web", f"web.{DOMAIN}", "www", f"front.{DOMAIN}"):
        assert wait_resolves(pods[2], name, [impl.net.ip(0)]) == [impl.net.ip(0)], name
    assert wait_resolves(pods[0], "db", [impl.net.ip(1)]) == [impl.net.ip(1)]
    impl.call("DEL", 0, "web").ok()
    seen["files_one"] = impl.snapshot()
    assert wait_resolves(pods[2], "web", []) == []
    assert wait_resolves(pods[2], "www", []) == []
    assert resolve(pods[2], "db") == [impl.net.ip(1)]
    assert len(impl.dnsmasq()) == 1
    impl.call("DEL", 1, "db").ok()
    seen["files_down"] = impl.snapshot()
    deadline = time.monotonic() + 20
    while impl.dnsmasq() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen["dnsmasq_left"] = impl.dnsmasq()
    return seen


def test_same_results_files_and_command_line_as_go(net: Net, plugin_dir: Path) -> None:
    assert GO_DNSNAME.exists(), "golang-github-containernetworking-plugin-dnsname is missing"
    go = lifecycle(Impl(GO_DNSNAME, net.state.root / "go", net))
    assert go["rules_up"] == accept_rules(net.node)  # the reference leaves its rule behind
    net.node.run("iptables", "-D", "INPUT", *go["rules_up"][0].split()[2:])
    ours_impl = Impl(plugin_dir / "dnsname", net.state.root / "pycni", net)
    ours = lifecycle(ours_impl)
    for key in ("add0", "add1", "files_up", "cmdline", "rules_up", "files_one", "files_down"):
        assert ours[key] == go[key], key
    assert go["dnsmasq_left"] == [] and ours["dnsmasq_left"] == []
    d = f"containers/cni/dnsname/{NETWORK}"
    assert {k: v[0] for k, v in go["files_up"].items() if k.startswith(d + "/")} == {
        f"{d}/": "0o700",
        f"{d}/addnhosts": "0o644",
        f"{d}/dnsmasq.conf": "0o700",
        f"{d}/lock": "0o750",
        f"{d}/pidfile": "0o644",
    }
    assert go["files_up"][f"{d}/pidfile"][1] == "<pid>"
    assert go["cmdline"] == [
        "/usr/sbin/dnsmasq",
        "-u",
        "root",
        f"--conf-file=$XDG/{d}/dnsmasq.conf",
    ]
    assert ours["add0"]["dns"] == {"nameservers": [GATEWAY], "search": [DOMAIN]}
    assert ours["files_up"][f"containers/cni/dnsname/{NETWORK}/addnhosts"][1] == (
        f"{net.ip(0)}\tweb\twww\tfront\n{net.ip(1)}\tdb\n"
    )
    assert f"containers/cni/dnsname/{NETWORK}/" not in ours["files_down"]
    assert accept_rules(net.node) == [], "pycni removes its accept rule with the network"
    assert not (ours_impl.xdg / "containers" / "cni" / "dnsname-pycni").exists()


def test_dual_stack_same_as_go(
    node: harness.Namespace,
    pod_factory: Callable[[], harness.Namespace],
    tmp_state: harness.State,
    plugin_dir: Path,
) -> None:
    """Two addresses per container: one hosts line each, both bridge addresses as servers."""
    net = Net(node, tmp_state)
    net.ranges = [net.ranges[0], [{"subnet": "fd97:3::/64", "gateway": "fd97:3::1"}]]
    try:
        net.attach(pod_factory())
        seen = {}
        for label, binary in (("go", GO_DNSNAME), ("pycni", plugin_dir / "dnsname")):
            impl = Impl(binary, tmp_state.root / label, net)
            result = impl.call("ADD", 0, "web", ["www"]).ok().json
            files_up = impl.snapshot()
            running = impl.dnsmasq()
            impl.call("DEL", 0, "web").ok()
            seen[label] = (result, files_up, impl.snapshot())
            wait_exited(running)  # the last DEL signals dnsmasq and returns: wait for port 53
        assert seen["pycni"] == seen["go"]
        result, files_up, _ = seen["pycni"]
        assert result["dns"]["nameservers"] == [GATEWAY, "fd97:3::1"]
        hosts = files_up[f"containers/cni/dnsname/{NETWORK}/addnhosts"][1]
        assert hosts.splitlines() == [f"{net.ip(0)}\tweb\twww", "fd97:3::2\tweb\twww"]
    finally:
        for pid in dnsmasq_pids(str(tmp_state.root)):
            os.kill(pid, signal.SIGKILL)


def test_go_and_pycni_share_a_network(net: Net, plugin_dir: Path) -> None:
    """Switching implementations with live containers: same lock, files and dnsmasq."""
    xdg = net.state.root / "shared"
    go, ours = Impl(GO_DNSNAME, xdg, net), Impl(plugin_dir / "dnsname", xdg, net)
    go.call("ADD", 0, "web").ok()
    ours.call("ADD", 1, "db", ["dbalias"]).ok()
    assert len(ours.dnsmasq()) == 1
    assert wait_resolves(net.pods[2], "dbalias", [net.ip(1)]) == [net.ip(1)]
    assert resolve(net.pods[2], "web") == [net.ip(0)]
    ours.call("CHECK", 0, "web").ok()
    ours.call("DEL", 0, "web").ok()  # pycni removes the reference's name
    assert wait_resolves(net.pods[2], "web", []) == []
    records = xdg / "containers" / "cni" / "dnsname-pycni" / NETWORK
    assert [p.name for p in records.iterdir()] == ["c1:eth0"]
    go.call("DEL", 1, "db").ok()  # and the reference pycni's last one: it stops dnsmasq
    deadline = time.monotonic() + 15  # the reference SIGKILLs it without waiting for its end
    while ours.dnsmasq():
        assert time.monotonic() < deadline, ours.dnsmasq()
        time.sleep(0.02)
    assert not (ours.base / NETWORK).exists()
    ours.call("DEL", 1, "db").ok()  # a late DEL prunes pycni's record of it
    assert not records.parent.exists()


def test_prev_dns_is_kept_and_1_0_result(net: Net, plugin_dir: Path) -> None:
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    prev = dict(net.prev[0], cniVersion="1.0.0", dns={"nameservers": ["9.9.9.9"], "search": ["a"]})
    out = impl.call("ADD", 0, "web", extra={"prevResult": prev}, version="1.0.0").ok().json
    assert out["cniVersion"] == "1.0.0"
    assert out["dns"] == {"nameservers": [GATEWAY, "9.9.9.9"], "search": ["a", DOMAIN]}
    impl.call("DEL", 0, None).ok()  # the name comes from pycni's record
    assert not (impl.base / NETWORK).exists() and impl.dnsmasq() == []


def test_check_sees_dnsmasq_and_entries(net: Net, plugin_dir: Path) -> None:
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    impl.call("ADD", 0, "web").ok()
    impl.call("ADD", 1, "db").ok()
    impl.call("CHECK", 0, "web").ok()
    impl.call("CHECK", 1, None).ok()
    hosts = impl.base / NETWORK / "addnhosts"
    hosts.write_text(hosts.read_text().replace("\tdb\n", "\tdb2\n"))
    run = impl.call("CHECK", 1, "db")
    assert run.code == 1 and "db is not published" in run.json["msg"]
    (pid,) = impl.dnsmasq()
    os.kill(pid, signal.SIGKILL)
    wait_exited([pid])  # until its sockets are closed
    run = impl.call("CHECK", 0, "web")
    assert run.code == 1 and "not running" in run.json["msg"]
    impl.call("DEL", 1, "db2").ok()
    impl.call("ADD", 1, "db").ok()  # restarts the dead dnsmasq
    impl.call("CHECK", 0, "web").ok()
    impl.call("DEL", 0, "web").ok()
    impl.call("DEL", 1, "db").ok()
    assert impl.dnsmasq() == [] and not (impl.base / NETWORK).exists()


def test_gc_drops_names_of_invalid_attachments(net: Net, plugin_dir: Path) -> None:
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    impl.call("ADD", 0, "web", ["www"]).ok()
    impl.call("ADD", 1, "db").ok()
    valid = {"cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]}
    impl.call("GC", 0, None, extra=valid, version="1.1.0").ok()
    assert (impl.base / NETWORK / "addnhosts").read_text() == f"{net.ip(1)}\tdb\n"
    assert wait_resolves(net.pods[2], "www", []) == []
    assert resolve(net.pods[2], "db") == [net.ip(1)]
    impl.call("GC", 0, None, extra={"cni.dev/valid-attachments": []}, version="1.1.0").ok()
    assert not (impl.base / NETWORK).exists() and impl.dnsmasq() == []
    assert accept_rules(net.node) == []
    impl.call("DEL", 1, "db").ok()  # after GC: nothing left to do, still fine


@pytest.mark.parametrize("step", ["conf", "firewall", "hosts", "record", "dnsmasq"])
def test_failed_add_rolls_back(net: Net, plugin_dir: Path, step: str) -> None:
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    fail = {"PYCNI_TEST_FAIL_AT": step}
    assert impl.call("ADD", 0, "web", env=fail).code == 1
    assert not (impl.base / NETWORK).exists() and impl.dnsmasq() == []
    assert accept_rules(net.node) == []
    impl.call("ADD", 0, "web").ok()
    if step in ("hosts", "record", "dnsmasq"):
        assert impl.call("ADD", 1, "db", env=fail).code == 1
        assert (impl.base / NETWORK / "addnhosts").read_text() == f"{net.ip(0)}\tweb\n"
        assert len(impl.dnsmasq()) == 1
    impl.call("DEL", 0, "web").ok()
    assert impl.dnsmasq() == [] and accept_rules(net.node) == []


def test_concurrent_adds_and_dels_share_one_dnsmasq(
    net: Net, plugin_dir: Path, pod_factory: Callable[[], harness.Namespace]
) -> None:
    for _ in range(3):
        net.attach(pod_factory())
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    count = len(net.pods)
    runs: dict[int, harness.PluginRun] = {}

    def call(command: str, i: int) -> None:
        runs[i] = impl.call(command, i, f"pod{i}")

    for command in ("ADD", "DEL"):
        threads = [threading.Thread(target=call, args=(command, i)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for run in runs.values():
            run.ok()
        if command == "ADD":
            hosts = (impl.base / NETWORK / "addnhosts").read_text().splitlines()
            assert sorted(hosts) == sorted(f"{net.ip(i)}\tpod{i}" for i in range(count))
            assert len(impl.dnsmasq()) == 1
            assert wait_resolves(net.pods[0], f"pod{count - 1}", [net.ip(count - 1)])
    assert impl.dnsmasq() == [] and not (impl.base / NETWORK).exists()


def test_through_the_runtime_with_the_aliases_capability(
    net: Net, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A podman-style conflist (bridge + dnsname) through libcni: aliases come from the
    runtime's capability args, the name from CNI_ARGS."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(net.state.root / "rt"))
    bridge = {k: v for k, v in net.bridge_conf().items() if k not in ("cniVersion", "name")}
    bridge["bridge"] = "cnidns1"
    bridge["ipam"] = dict(bridge["ipam"], ranges=[[{"subnet": "10.97.4.0/24"}]], routes=[])
    conf = {
        "cniVersion": "0.4.0",
        "name": "rtnet",
        "plugins": [
            bridge,
            {"type": "dnsname", "domainName": DOMAIN, "capabilities": {"aliases": True}},
        ],
    }
    conflist = conf_list_from_bytes(json.dumps(conf).encode())
    cni = CNIConfig([str(plugin_dir)], cache_dir=str(net.state.cache_dir))
    rts = [
        RuntimeConf(
            container_id=f"rt{i}",
            netns=pod.path,
            ifname="eth1",
            args=(("IgnoreUnknown", "1"), ("K8S_POD_NAME", f"svc{i}")),
            capability_args={"aliases": {"rtnet": [f"alias{i}"]}},
        )
        for i, pod in enumerate(net.pods[:2])
    ]
    with net.node.entered():
        results = [cni.add_network_list(conflist, rt) for rt in rts]
        cni.check_network_list(conflist, rts[0])
    ips = [str(r.ips[0].address.ip) for r in results]
    assert results[0].dns.nameservers == ["10.97.4.1"]
    for i in range(2):
        for name in (f"svc{i}", f"alias{i}.{DOMAIN}"):
            got = wait_resolves(net.pods[1 - i], name, [ips[i]], server="10.97.4.1")
            assert got == [ips[i]], name
    with net.node.entered():
        for rt in rts:
            cni.del_network_list(conflist, rt)
    assert dnsmasq_pids(str(net.state.root / "rt")) == []
    assert not (net.state.root / "rt" / "containers" / "cni" / "dnsname" / "rtnet").exists()


PYCNI = str(Path(sys.executable).parent / "pycni")


def test_inspect_shows_servers_and_cleanup_stops_a_server_without_pods(
    net: Net, plugin_dir: Path
) -> None:
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    impl.call("ADD", 0, "web", ["www"]).ok()
    impl.call("ADD", 1, "db").ok()
    netns_dir = net.state.root / "netns"  # only our pods: the machine may have hundreds more
    netns_dir.mkdir()
    for pod in net.pods:
        (netns_dir / pod.name).symlink_to(pod.path)
    dirs = [
        "--netns-dir",
        str(netns_dir),
        "--netconf-dir",
        str(net.state.conf_dir),
        "--cache-dir",
        str(net.state.cache_dir),
        "--data-dir",
        str(net.state.data_dir),
        "--dnsname-dir",
        str(impl.base),
    ]

    def inspect() -> dict[str, Any]:
        data = json.loads(net.node.run(PYCNI, "inspect", "--json", *dirs).stdout)
        assert isinstance(data, dict)
        return data

    data = inspect()
    (server,) = data["dns_servers"]
    assert server["network"] == NETWORK and server["domain"] == DOMAIN
    assert server["interface"] == BRIDGE and server["in_this_namespace"]
    assert server["pid"] == impl.dnsmasq()[0]
    assert server["hosts"] == [f"{net.ip(0)} web www", f"{net.ip(1)} db"]
    assert [leak for leak in data["leaks"] if leak["kind"] == "dnsmasq"] == []
    text = net.node.run(PYCNI, "inspect", *dirs).stdout
    assert "DNS servers (dnsname) (1)" in text
    assert f"{NETWORK}: {GATEWAY} on {BRIDGE}, domain {DOMAIN}, dnsmasq pid" in text
    assert "web" in text and "aliases www" in text

    for pod in net.pods:  # every container dies without its DEL
        pod.delete()
    # young files are an ADD that may be in progress: no leak within the grace period
    assert [leak for leak in inspect()["leaks"] if leak["kind"] == "dnsmasq"] == []
    dirs += ["--grace-period", "0"]
    leaks = [leak for leak in inspect()["leaks"] if leak["kind"] == "dnsmasq"]
    assert [(leak["subject"], leak["network"]) for leak in leaks] == [
        (str(impl.base / NETWORK), NETWORK)
    ]
    assert "serves no live container" in leaks[0]["reason"]
    proc = net.node.run(PYCNI, "cleanup", "--no-gc", *dirs, check=False)
    assert f"removed dnsmasq {impl.base / NETWORK}" in proc.stdout, proc.stdout + proc.stderr
    assert impl.dnsmasq() == [] and not (impl.base / NETWORK).exists()
    assert accept_rules(net.node) == []
    assert inspect()["dns_servers"] == []


def test_add_waits_for_port_53_held_by_an_exiting_process(net: Net, plugin_dir: Path) -> None:
    """Another process (a dnsmasq still exiting) holds the gateway's port 53 for a moment: the
    ADD retries dnsmasq's start instead of failing."""
    proc = subprocess.Popen(
        ["nsenter", f"--net={net.node.path}", "--", sys.executable, "-c",
         "import socket, time\n"
         f"s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(({GATEWAY!r}, 53))\n"
         "print('bound', flush=True); time.sleep(0.8)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "bound"
        impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
        impl.call("ADD", 0, "web").ok()
        assert len(impl.dnsmasq()) == 1
        impl.call("DEL", 0, "web").ok()
        assert impl.dnsmasq() == []
    finally:
        proc.kill()
        proc.wait()


def tree(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root``: (mode, owner, content or link target)."""
    out: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [*dirnames, *filenames]:
            path = Path(dirpath) / entry
            st = path.lstat()
            if path.is_symlink():
                body = os.readlink(path)
            elif path.is_dir():
                body = "<dir>"
            else:
                body = path.read_text()
            out[str(path.relative_to(root))] = (st.st_mode, st.st_uid, body)
    return out


NOBODY = 65534


@pytest.mark.parametrize("planted", ["dnsname", "dnsname-pycni", f"dnsname/{NETWORK}"])
@pytest.mark.parametrize("owner", ["user", "root"])
def test_planted_symlinks_in_the_runtime_dir_are_never_followed(
    net: Net, plugin_dir: Path, planted: str, owner: str
) -> None:
    """A user who owns XDG_RUNTIME_DIR plants ``containers/cni/<planted>`` -> a root-owned
    directory. A user-owned runtime dir is refused as a whole (code 4, naming it); in a
    root-owned one the symlink itself is refused. The target and its contents are untouched
    after ADD and DEL, and nothing is written anywhere else."""
    target = net.state.root / "precious"
    (target / NETWORK).mkdir(parents=True)
    (target / "keep.conf").write_text("root's own file\n")
    (target / NETWORK / "addnhosts").write_text("10.9.9.9\tother\n")
    xdg = net.state.root / "xdg"
    cni = xdg / "containers" / "cni"
    (cni / planted).parent.mkdir(parents=True)
    os.symlink(target / NETWORK if "/" in planted else target, cni / planted)
    if owner == "user":
        for path in (xdg, xdg / "containers", cni, cni / planted):
            os.lchown(path, NOBODY, NOBODY)
    before, xdg_before = tree(target), tree(xdg)
    impl = Impl(plugin_dir / "dnsname", xdg, net)

    add = impl.call("ADD", 0, "web")
    assert add.code == 1, add
    err = add.json
    assert err["code"] == 4, err  # invalid environment variables
    assert "refusing the runtime directory" in err["msg"], err
    if owner == "user":
        assert f"{xdg} is owned by uid {NOBODY}, not uid 0" in err["msg"], err
    else:
        assert "is a symlink" in err["msg"] and "not followed" in err["msg"], err
    assert "XDG_RUNTIME_DIR must name a directory owned by root" in err["details"], err
    assert impl.call("DEL", 0, "web").code == 0  # DEL never fails; it skips
    assert impl.call("DEL", 0, None).code == 0
    assert tree(target) == before
    assert tree(xdg) == xdg_before
    assert impl.dnsmasq() == []


def test_a_second_container_with_the_same_name_keeps_the_first_ones_records(
    net: Net, plugin_dir: Path
) -> None:
    """Two containers ADD with K8S_POD_NAME=web: both are published; DEL of one removes only
    its own lines (and a repeated ADD replaces only its own)."""
    impl = Impl(plugin_dir / "dnsname", net.state.root / "x", net)
    hosts = impl.base / NETWORK / "addnhosts"
    impl.call("ADD", 0, "web").ok()
    impl.call("ADD", 1, "web").ok()
    impl.call("ADD", 1, "web").ok()  # repeated: still one line for it
    assert hosts.read_text() == f"{net.ip(0)}\tweb\n{net.ip(1)}\tweb\n"
    assert sorted(wait_resolves(net.pods[2], "web", [net.ip(0), net.ip(1)])) == sorted(
        [net.ip(0), net.ip(1)]
    )
    impl.call("DEL", 1, "web").ok()
    assert hosts.read_text() == f"{net.ip(0)}\tweb\n"
    assert wait_resolves(net.pods[2], "web", [net.ip(0)]) == [net.ip(0)]
    impl.call("CHECK", 0, "web").ok()
    impl.call("DEL", 0, "web").ok()
    assert impl.dnsmasq() == [] and not (impl.base / NETWORK).exists()
