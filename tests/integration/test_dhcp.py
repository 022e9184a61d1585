"""dhcp IPAM against a real DHCP server (dnsmasq in its own namespace), via macvlan and bridge.

Topology: a "server" namespace runs dnsmasq on one end of a veth whose other end (``dhcpup0``)
is in the node; pods get a macvlan of ``dhcpup0`` (or a bridge port when ``dhcpup0`` is put
on a node bridge). pycni's DHCP daemon runs on a tmp socket with a tmp lease dir.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import harness

pytestmark = pytest.mark.kernel

DNSMASQ = "/usr/sbin/dnsmasq"
UPLINK = "dhcpup0"
MAC = "02:42:0a:48:00:4d"
FIXED = "10.72.0.77"


@dataclass
class Server:
    ns: harness.Namespace
    leases: Path
    log: Path

    def lease_lines(self) -> list[list[str]]:
        """The lease file's lines, read until two reads 20 ms apart agree.

        dnsmasq rewrites the file in place (truncate, then write), so one read can catch it empty
        or half written.
        """
        previous: str | None = None
        for _ in range(50):
            text = self.leases.read_text() if self.leases.exists() else ""
            if text == previous:
                break
            previous = text
            time.sleep(0.02)
        return [line.split() for line in (previous or "").splitlines() if line.strip()]

    def lease_for(self, mac: str) -> list[str] | None:
        for fields in self.lease_lines():
            if fields[1] == mac:
                return fields
        return None


def _wait(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def dhcp_server(node: harness.Namespace, pod_factory: Any, tmp_path: Path) -> Iterator[Server]:
    assert os.path.exists(DNSMASQ), "dnsmasq is not installed (scripts/setup-system.sh)"
    srv: harness.Namespace = pod_factory()
    node.run("ip", "link", "add", UPLINK, "type", "veth", "peer", "name", "srv0")
    node.run("ip", "link", "set", "srv0", "netns", srv.path)
    node.run("ip", "link", "set", UPLINK, "up")
    srv.run("ip", "addr", "add", "10.72.0.1/24", "dev", "srv0")
    srv.run("ip", "link", "set", "srv0", "up")
    server = Server(srv, tmp_path / "dnsmasq.leases", tmp_path / "dnsmasq.log")
    proc = subprocess.Popen(
        [
            "nsenter", f"--net={srv.path}", "--", DNSMASQ, "-k", "--conf-file=/dev/null",
            "--port=0", "--user=root", "--interface=srv0", "--bind-interfaces",
            "--dhcp-range=10.72.0.50,10.72.0.99,255.255.255.0,2m",
            f"--dhcp-host={MAC},{FIXED}", "--dhcp-option=option:router,10.72.0.1",
            "--dhcp-option=option:T1,4", "--dhcp-option=option:T2,100",
            f"--dhcp-leasefile={server.leases}", "--log-dhcp",
            f"--log-facility={server.log}", "--dhcp-authoritative",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert _wait(lambda: server.log.exists() and "DHCP" in server.log.read_text()), (
            "dnsmasq did not start"
        )
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Daemon:
    socket: str
    lease_dir: Path
    proc: subprocess.Popen[bytes]


def _start_daemon(tmp_path: Path, name: str = "d") -> Daemon:
    sock = str(tmp_path / f"{name}.sock")
    lease_dir = tmp_path / f"{name}-leases"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pycni.cli.dhcp_cmd", "--socket", sock,
         "--lease-dir", str(lease_dir), "--timeout", "3", "--resend-timeout", "20"],
    )  # fmt: skip
    assert _wait(lambda: os.path.exists(sock)), "the DHCP daemon did not start"
    return Daemon(sock, lease_dir, proc)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = _start_daemon(tmp_path)
    try:
        yield d
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=30)


def _macvlan_conf(sock: str, **ipam: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": "dhcpnet",
        "type": "macvlan",
        "master": UPLINK,
        "mac": MAC,
        "ipam": {"type": "dhcp", "daemonSocketPath": sock, **ipam},
    }


def _run(
    plugin_dir: Path, kind: str, command: str, conf: dict[str, Any], pod: harness.Namespace
) -> harness.PluginRun:
    return harness.exec_plugin(
        plugin_dir / kind,
        command,
        conf,
        container_id="ctr-dhcp",
        netns=pod.path,
        cni_path=str(plugin_dir),
    )


def test_macvlan_pod_gets_its_fixed_lease_renews_and_releases_on_del(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    dhcp_server: Server,
    daemon: Daemon,
) -> None:
    pod = pod_factory()
    conf = _macvlan_conf(daemon.socket)
    with node.entered():
        res = _run(plugin_dir, "macvlan", "ADD", conf, pod).ok().json
    assert res["ips"] == [{"address": f"{FIXED}/24", "gateway": "10.72.0.1", "interface": 0}]
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.72.0.1"}]
    assert [a for a in pod.addresses("eth0") if "." in a] == [f"{FIXED}/24"]
    assert pod.ping("10.72.0.1")
    first = dhcp_server.lease_for(MAC)
    assert first is not None and first[2] == FIXED
    # the client ID is containerID/network/ifname with a 0 type byte
    assert first[4] == "00:" + ":".join(f"{b:02x}" for b in b"ctr-dhcp/dhcpnet/eth0")
    assert len(list(daemon.lease_dir.glob("*.json"))) == 1

    # T1 is 4 s: the daemon renews, and dnsmasq moves the lease's expiry forward
    def renewed() -> bool:
        lease = dhcp_server.lease_for(MAC)
        return lease is not None and int(lease[0]) > int(first[0])

    assert _wait(renewed, timeout=15)
    assert "DHCPREQUEST(srv0) 10.72.0.77" in dhcp_server.log.read_text()

    with node.entered():
        _run(plugin_dir, "macvlan", "CHECK", {**conf, "prevResult": res}, pod).ok()
        _run(plugin_dir, "macvlan", "DEL", conf, pod).ok()
    assert _wait(lambda: dhcp_server.lease_for(MAC) is None), "DHCPRELEASE did not reach dnsmasq"
    assert "DHCPRELEASE(srv0) 10.72.0.77" in dhcp_server.log.read_text()
    assert list(daemon.lease_dir.glob("*.json")) == []
    with node.entered():
        _run(plugin_dir, "macvlan", "DEL", conf, pod).ok()  # no lease: still success


def test_bridge_chain_with_dhcp_ipam_and_a_dynamic_address(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    dhcp_server: Server,
    daemon: Daemon,
) -> None:
    node.run("ip", "link", "add", "dhcpbr0", "type", "bridge")
    node.run("ip", "link", "set", UPLINK, "master", "dhcpbr0")
    node.run("ip", "link", "set", "dhcpbr0", "up")
    pod = pod_factory()
    conf = {
        "cniVersion": "1.0.0",
        "name": "dhcpbr",
        "type": "bridge",
        "bridge": "dhcpbr0",
        "ipam": {"type": "dhcp", "daemonSocketPath": daemon.socket, "priority": 50},
    }
    with node.entered():
        res = _run(plugin_dir, "bridge", "ADD", conf, pod).ok().json
    ips = res["ips"]
    assert isinstance(ips, list) and len(ips) == 1
    address = str(ips[0]["address"])
    assert address.startswith("10.72.0.") and address.endswith("/24")
    assert 50 <= int(address.split("/")[0].rsplit(".", 1)[1]) <= 99
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.72.0.1", "priority": 50}]
    assert [a for a in pod.addresses("eth0") if "." in a] == [address]
    assert pod.ping("10.72.0.1")
    with node.entered():
        _run(plugin_dir, "bridge", "DEL", conf, pod).ok()
    assert "eth0" not in pod.links()
    assert list(daemon.lease_dir.glob("*.json")) == []


def test_daemon_restart_resumes_the_stored_lease(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    dhcp_server: Server,
    tmp_path: Path,
) -> None:
    pod = pod_factory()
    d = _start_daemon(tmp_path, "r")
    conf = _macvlan_conf(d.socket)
    try:
        with node.entered():
            _run(plugin_dir, "macvlan", "ADD", conf, pod).ok()
        d.proc.terminate()
        d.proc.wait(timeout=30)
        assert dhcp_server.lease_for(MAC) is not None  # stopping does not release
        d = _start_daemon(tmp_path, "r")
        with node.entered():
            _run(plugin_dir, "macvlan", "DEL", conf, pod).ok()
        assert _wait(lambda: dhcp_server.lease_for(MAC) is None)
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=30)


def test_status_is_50_without_a_daemon_51_with_a_dead_one_and_ok_with_one(
    node: harness.Namespace, plugin_dir: Path, daemon: Daemon, tmp_path: Path
) -> None:
    conf: dict[str, object] = {
        "cniVersion": "1.1.0",
        "name": "dhcpnet",
        "ipam": {"type": "dhcp", "daemonSocketPath": daemon.socket},
    }
    with node.entered():
        ok = harness.exec_plugin(plugin_dir / "dhcp", "STATUS", conf, cni_path=str(plugin_dir))
        gone: dict[str, object] = {
            **conf,
            "ipam": {"type": "dhcp", "daemonSocketPath": str(tmp_path / "no.sock")},
        }
        bad = harness.exec_plugin(plugin_dir / "dhcp", "STATUS", gone, cni_path=str(plugin_dir))
        # a daemon that died: its socket is still there, nobody listens on it
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(tmp_path / "dead.sock"))
        stale.close()
        dead: dict[str, object] = {
            **conf,
            "ipam": {"type": "dhcp", "daemonSocketPath": str(tmp_path / "dead.sock")},
        }
        hung = harness.exec_plugin(plugin_dir / "dhcp", "STATUS", dead, cni_path=str(plugin_dir))
    ok.ok()
    assert bad.code == 1 and bad.json["code"] == 50  # never started: no pod depends on it
    assert "not reachable" in str(bad.json["msg"]) and "not running" in str(bad.json["msg"])
    assert hung.code == 1 and hung.json["code"] == 51  # its pods' leases are not renewed
    assert "not being renewed" in str(hung.json["msg"])


def test_add_without_a_daemon_or_with_a_bad_option_is_a_cni_error(
    node: harness.Namespace, pod_factory: Any, plugin_dir: Path, daemon: Daemon, tmp_path: Path
) -> None:
    pod = pod_factory()
    pod.run("ip", "link", "add", "eth0", "type", "bridge")
    base = {"cniVersion": "1.1.0", "name": "dhcpnet"}
    nodaemon = {**base, "ipam": {"type": "dhcp", "daemonSocketPath": str(tmp_path / "x.sock")}}
    badopt = {
        **base,
        "ipam": {
            "type": "dhcp",
            "daemonSocketPath": daemon.socket,
            "request": [{"option": "no-such-option"}],
        },
    }
    with node.entered():
        r1 = _run(plugin_dir, "dhcp", "ADD", nodaemon, pod)
        r2 = _run(plugin_dir, "dhcp", "ADD", badopt, pod)
    assert r1.code == 1 and "error dialing DHCP daemon" in str(r1.json["msg"])
    assert r2.code == 1 and r2.json["code"] == 7 and "no-such-option" in str(r2.json["msg"])
    assert "Traceback" not in r1.stdout + r2.stdout


@pytest.mark.interop
def test_same_lease_and_result_as_the_go_plugin_and_daemon(
    node: harness.Namespace,
    pod_factory: Any,
    plugin_dir: Path,
    go_plugin_dir: Path,
    dhcp_server: Server,
    daemon: Daemon,
    tmp_path: Path,
) -> None:
    go_sock = str(tmp_path / "go-dhcp.sock")
    go = subprocess.Popen(
        [str(go_plugin_dir / "dhcp"), "daemon", "-socketpath", go_sock],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait(lambda: os.path.exists(go_sock)), "the Go DHCP daemon did not start"
        results = []
        for directory, sock in ((go_plugin_dir, go_sock), (plugin_dir, daemon.socket)):
            pod = pod_factory()
            conf = {**_macvlan_conf(sock), "cniVersion": "1.0.0"}
            with node.entered():
                res = _run(directory, "macvlan", "ADD", conf, pod).ok().json
                addrs = [a for a in pod.addresses("eth0") if "." in a]
                _run(directory, "macvlan", "DEL", conf, pod).ok()
            assert _wait(lambda: dhcp_server.lease_for(MAC) is None)
            results.append((res["ips"], res["routes"], addrs))
        assert results[0] == results[1]
        assert results[1][2] == [f"{FIXED}/24"]
    finally:
        go.terminate()
        go.wait(timeout=30)
