"""Every plugin type's in-process ADD and DEL import exactly its named cold path (issue 36).

Without a daemon every plugin call is a Python start-up, and what it imports is most of its
cost. pycni.skel.cold_path names, per type, the modules a call may import; here every type of
pycni.skel.registry.PLUGIN_TYPES runs its ADD and DEL as a runtime runs it (its installed
in-process entry point, exec'd from a private node namespace, a real pod namespace, a minimal
config that makes the call do its work: links made, addresses assigned, rules written) under
``python -X importtime``, whose report names every module the process imported with an import
statement (the registry loads a plugin with ``__import__``, so the plugin's own module is named
too). The modules seen, less what the bare interpreter imports at start-up, must be the named
list (a name the call no longer imports must leave it), and none of cold_path.OFF_PATH beyond
the type's cold_path.DEBT. Chained plugins get a bridge's result as prevResult; IPAM types are
called directly (host-local also inside bridge's process, where its plugin is delegated to);
dhcp gets a real DHCP server and daemon. vlan, ipvlan, dummy and vrf need kernel modules this
kernel lacks: their ADD runs up to the kernel's refusal (``not supported``), which is the whole
of their path here; the VM lane (tests/fullkernel) runs their work.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pycni.entrypoints import install
from pycni.skel import cold_path, registry
from pycni.skel import run as skel
from tests import harness
from tests.integration.test_dhcp import MAC, UPLINK, daemon, dhcp_server  # noqa: F401

pytestmark = pytest.mark.kernel

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)
FULLKERNEL_ONLY = {"vlan", "ipvlan", "dummy", "vrf"}


def imported(stderr: str) -> set[str]:
    return set(_IMPORTED.findall(stderr))


@pytest.fixture(scope="module")
def startup() -> set[str]:
    """What the bare interpreter imports before any entry code runs."""
    proc = subprocess.run(
        [install.interpreter(), "-X", "importtime", "-IS", "-c", "pass"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return imported(proc.stderr)


@pytest.fixture(scope="module")
def bindir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cold-bin")
    install.install(directory, form="inprocess")
    return directory


def run_traced(
    entry: Path, command: str, config: dict[str, object], env: dict[str, str]
) -> tuple[set[str], Reply]:
    """Run ``entry`` (an in-process entry point) as a runtime would, under -X importtime: the
    modules it imported and its reply."""
    proc = subprocess.run(
        [install.interpreter(), "-X", "importtime", "-IS", str(entry)],
        input=json.dumps(config).encode(),
        env={**env, "CNI_COMMAND": command},
        capture_output=True,
        timeout=120,
        check=False,
    )
    modules = imported(proc.stderr.decode())
    assert "pycni.skel.main" in modules, proc.stderr[-3000:]  # the report is there
    return modules, Reply(proc.stdout.decode(), proc.returncode)


@dataclass
class Reply:
    stdout: str
    exit_code: int


@dataclass
class Scene:
    """One type's call: the node and pod, the entry points, and what the call needs."""

    node: harness.Namespace
    pod: harness.Namespace
    bindir: Path
    tmp: Path
    env: dict[str, str]
    request: pytest.FixtureRequest
    undo: list[Callable[[], None]]

    def ipam(self, subnet: str) -> dict[str, Any]:
        return {"type": "host-local", "dataDir": str(self.tmp / "ipam"),
                "ranges": [[{"subnet": subnet}]]}  # fmt: skip

    def veth(self, name: str) -> str:
        self.node.run("ip", "link", "add", name, "type", "veth", "peer", "name", name + "p")
        self.node.run("ip", "link", "set", name, "up")
        return name

    def bridged(self) -> dict[str, Any]:
        """A bridge ADD in this process (not traced): the prevResult of a chained plugin."""
        config = {**BASE, "type": "bridge", "bridge": "coldbr0", "isGateway": True,
                  "ipam": self.ipam("10.97.1.0/24")}  # fmt: skip
        env = {**self.env, "CNI_IFNAME": "eth0"}
        with self.node.entered():
            added = skel.run("bridge", {**env, "CNI_COMMAND": "ADD"}, json.dumps(config).encode())
        assert added.exit_code == 0, added.stdout

        def delete() -> None:
            with self.node.entered():
                skel.run("bridge", {**env, "CNI_COMMAND": "DEL"}, json.dumps(config).encode())

        self.undo.append(delete)
        return dict(json.loads(added.stdout))


BASE = {"cniVersion": "1.0.0", "name": "coldnet"}
Setup = Callable[[Scene], tuple[dict[str, Any], str, Callable[[str], None]]]


def _loopback(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return {"type": "loopback"}, "lo", lambda out: None


def _bridge(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    config = {"type": "bridge", "bridge": "cold0", "isGateway": True, "hairpinMode": True,
              "ipam": s.ipam("10.97.0.0/24")}  # fmt: skip
    return config, "eth0", lambda out: _assert_in("10.97.0.2/24", s.pod.addresses("eth0"))


def _ptp(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return (
        {"type": "ptp", "ipMasq": True, "ipam": s.ipam("10.97.2.0/24")},
        "eth0",
        lambda out: _addressed(s),
    )


def _macvlan(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    config = {"type": "macvlan", "master": s.veth("coldm0"), "ipam": s.ipam("10.97.3.0/24")}
    return config, "eth0", lambda out: _addressed(s)


def _host_device(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    config = {"type": "host-device", "device": s.veth("coldhd0"), "ipam": s.ipam("10.97.4.0/24")}
    return config, "eth0", lambda out: _addressed(s)


def _tap(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return {"type": "tap", "ipam": s.ipam("10.97.5.0/24")}, "eth0", lambda out: _addressed(s)


def _vlan(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return (
        {"type": "vlan", "master": s.veth("coldv0"), "vlanId": 5, "ipam": s.ipam("10.97.9.0/24")},
        "eth0",
        lambda out: None,
    )


def _ipvlan(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return (
        {"type": "ipvlan", "master": s.veth("coldi0"), "ipam": s.ipam("10.97.10.0/24")},
        "eth0",
        lambda out: None,
    )


def _dummy(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return {"type": "dummy", "ipam": s.ipam("10.97.6.0/24")}, "eth0", lambda out: None


def _host_local(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    config = {"type": "host-local", "ipam": s.ipam("10.97.7.0/24")}
    return config, "eth0", lambda out: _assert_in("10.97.7.2", os.listdir(s.tmp / "ipam/coldnet"))


def _static(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    ipam = {"type": "static", "addresses": [{"address": "10.97.8.5/24"}]}
    return {"type": "static", "ipam": ipam}, "eth0", lambda out: _assert_in("10.97.8.5/24", out)


def _dhcp(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    s.request.getfixturevalue("dhcp_server")
    sock = s.request.getfixturevalue("daemon").socket
    config = {**BASE, "type": "macvlan", "master": UPLINK, "mac": MAC, "ipam": {}}
    env = {**s.env, "CNI_IFNAME": "eth0"}
    with s.node.entered():  # the pod's link, without an address: the dhcp call gets one
        added = skel.run("macvlan", {**env, "CNI_COMMAND": "ADD"}, json.dumps(config).encode())
    assert added.exit_code == 0, added.stdout
    ipam = {"type": "dhcp", "daemonSocketPath": sock}
    return {"type": "dhcp", "ipam": ipam}, "eth0", lambda out: _assert_in("10.72.0.77", out)


def _chained(extra: dict[str, Any], check: Callable[[Scene], None] = lambda s: None) -> Setup:
    def setup(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
        return {**extra, "prevResult": s.bridged()}, "eth0", lambda out: check(s)

    return setup


def _flannel(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    subnet = s.tmp / "subnet.env"
    subnet.write_text(
        "FLANNEL_NETWORK=10.98.0.0/16\nFLANNEL_SUBNET=10.98.7.1/24\n"
        "FLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n"
    )
    config = {
        "type": "flannel", "subnetFile": str(subnet), "dataDir": str(s.tmp / "flannel"),
        "ipam": {"dataDir": str(s.tmp / "ipam")}, "delegate": {"bridge": "coldfl0"},
    }  # fmt: skip
    return config, "eth0", lambda out: _assert_in("10.98.7.2/24", s.pod.addresses("eth0"))


def _dnsname(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    s.env["XDG_RUNTIME_DIR"] = str(s.tmp)
    s.env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAME=coldpod"
    s.undo.append(lambda: _stop_dnsmasq(s.tmp))
    config = {"type": "dnsname", "domainName": "cold.test", "prevResult": s.bridged()}
    hosts = s.tmp / "containers/cni/dnsname/coldnet/addnhosts"
    return config, "eth0", lambda out: _assert_in("10.97.1.2", hosts.read_text())


def _vrf(s: Scene) -> tuple[dict[str, Any], str, Callable[[str], None]]:
    return (
        {"type": "vrf", "vrfname": "coldvrf", "prevResult": s.bridged()},
        "eth0",
        lambda out: None,
    )


def _addressed(s: Scene) -> None:
    assert [a for a in s.pod.addresses("eth0") if a.startswith("10.97.")], s.pod.addresses("eth0")


def _assert_in(item: str, where: Any) -> None:
    assert item in where, f"{item!r} not in {where!r}"


def _stop_dnsmasq(marker: Path) -> None:
    """The dnsmasq a failed dnsname call left (DEL stops it otherwise)."""
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"dnsmasq" in cmdline and str(marker).encode() in cmdline:
            os.kill(int(entry), signal.SIGTERM)


SETUPS: dict[str, Setup] = {
    "loopback": _loopback,
    "bridge": _bridge,
    "ptp": _ptp,
    "macvlan": _macvlan,
    "host-device": _host_device,
    "tap": _tap,
    "vlan": _vlan,
    "ipvlan": _ipvlan,
    "dummy": _dummy,
    "host-local": _host_local,
    "static": _static,
    "dhcp": _dhcp,
    "portmap": _chained(
        {
            "type": "portmap",
            "capabilities": {"portMappings": True},
            "runtimeConfig": {
                "portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]
            },
        },
        lambda s: _assert_in("18080", s.node.run("nft", "list", "ruleset").stdout),
    ),
    "tuning": _chained(
        {"type": "tuning", "mtu": 1300},
        lambda s: _assert_in(1300, [s.pod.links()["eth0"]["mtu"]]),
    ),
    "bandwidth": _chained(
        {"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 80_000},
        lambda s: _assert_in("tbf", s.node.run("tc", "qdisc", "show").stdout),
    ),
    "firewall": _chained(
        {"type": "firewall", "backend": "nftables"},
        lambda s: _assert_in("10.97.1.2", s.node.run("nft", "list", "ruleset").stdout),
    ),
    "sbr": _chained(
        {"type": "sbr"},
        lambda s: _assert_in("lookup 100", s.pod.run("ip", "rule", "show").stdout),
    ),
    "flannel": _flannel,
    "dnsname": _dnsname,
    "vrf": _vrf,
}


def test_every_registered_type_has_a_call_here() -> None:
    assert set(SETUPS) == set(registry.PLUGIN_TYPES)
    assert set(cold_path.BY_TYPE) == set(registry.PLUGIN_TYPES)


def _literal(modules: set[str]) -> str:
    names = " ".join(sorted(modules - cold_path.ENTRY))
    body = textwrap.fill(names, 96, initial_indent=" " * 12, subsequent_indent=" " * 12)
    return f'_names(\n        """\n{body}\n        """\n    ),'


@pytest.mark.parametrize("plugin_type", sorted(registry.PLUGIN_TYPES))
def test_add_and_del_import_exactly_the_named_cold_path(
    plugin_type: str,
    node: harness.Namespace,
    pod_factory: Any,
    tmp_path: Path,
    bindir: Path,
    startup: set[str],
    request: pytest.FixtureRequest,
) -> None:
    pod = pod_factory()
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_CONTAINERID": "cold1", "CNI_NETNS": pod.path, "CNI_PATH": str(bindir),
        "CNI_ARGS": "",
    }  # fmt: skip
    scene = Scene(node, pod, bindir, tmp_path, env, request, [])
    try:
        extra, ifname, did_its_work = SETUPS[plugin_type](scene)
        config = {**BASE, **extra}
        call_env = {**scene.env, "CNI_IFNAME": ifname}
        with node.entered():
            added, add_reply = run_traced(bindir / plugin_type, "ADD", config, call_env)
            if plugin_type in FULLKERNEL_ONLY:
                # this kernel refuses the link kind (or VRF): the path ran up to that refusal
                assert add_reply.exit_code != 0, add_reply.stdout
                assert "not supported" in add_reply.stdout.lower(), add_reply.stdout
            else:
                assert add_reply.exit_code == 0, add_reply.stdout
                did_its_work(add_reply.stdout)
            deleted, del_reply = run_traced(bindir / plugin_type, "DEL", config, call_env)
        assert del_reply.exit_code == 0, del_reply.stdout
    finally:
        for undo in reversed(scene.undo):
            undo()
    if plugin_type == "bridge":  # host-local ran inside bridge's process, not exec'd
        assert "pycni.plugins.ipam.host_local.plugin" in added
        assert not list((tmp_path / "ipam" / "coldnet").glob("10.97.*"))  # released by DEL
    seen = (added | deleted) - startup
    ours = {name for name in seen if name == "pycni" or name.startswith("pycni.")}
    named = cold_path.modules(plugin_type)
    assert ours == named, (
        f"{plugin_type}'s ADD and DEL import {sorted(ours - named)} beyond its cold path and "
        f"no longer {sorted(named - ours)}; pycni.skel.cold_path.BY_TYPE[{plugin_type!r}] "
        f"would read:\n{_literal(ours)}"
    )
    heavy = {
        off for name in seen for off in cold_path.OFF_PATH
        if name == off or name.startswith(off + ".")
    }  # fmt: skip
    allowed = cold_path.DEBT.get(plugin_type, frozenset())
    assert heavy <= allowed, f"{plugin_type} imports {sorted(heavy - allowed)} on its cold path"
    assert allowed <= heavy, f"{plugin_type} no longer imports {sorted(allowed - heavy)}: drop it"
    stdlib = {
        name for name in seen - ours
        if not any(name == d or name.startswith(d + ".") for d in allowed)
    }  # fmt: skip
    assert stdlib <= cold_path.STDLIB, (
        f"add to cold_path.STDLIB: {sorted(stdlib - cold_path.STDLIB)}"
    )
