"""`pycni doctor` against a node namespace and test dirs (never the host's /etc/cni):
a healthy node is all ok (warnings only for link types this kernel lacks); a stopped daemon,
a network naming a missing plugin and a leaked reservation give one fail line each, exit 1."""

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

PYCNI = str(Path(sys.executable).parent / "pycni")
NET = "doc-net"
# What this kernel (a Firecracker VM's) is built without; anything else must be ok.
MISSING_HERE = {
    "kernel: vlan",
    "kernel: ipvlan",
    "kernel: vrf",
    "kernel: dummy",
    "kernel: wireguard",
    "kernel: ipip",
    "kernel: bridge vlan filtering",
}

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


@pytest.fixture(scope="module")
def forwarders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Entry points that forward to a private daemon socket (which nobody serves yet)."""
    from pycni.entrypoints import install

    directory = tmp_path_factory.mktemp("doctor-plugins")
    sock = str(tmp_path_factory.mktemp("doctor-daemon") / "pycni.sock")
    install.install(directory, form="auto", socket_path=sock)
    return directory, sock


@pytest.fixture
def daemon(forwarders: tuple[Path, str]) -> Iterator[str]:
    _dir, sock = forwarders
    with harness.running_daemon(sock, "ERROR"):
        yield sock


def _conflist(name: str, data_dir: Path, plugins: list[dict[str, Any]]) -> bytes:
    first = {
        "type": "bridge",
        "bridge": "doc0",
        "isGateway": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.79.0.0/24"}]],
            "dataDir": str(data_dir),
        },
    }
    return json.dumps({"cniVersion": "1.1.0", "name": name, "plugins": [first, *plugins]}).encode()


def _doctor(
    node: harness.Namespace, state: harness.State, plugins: Path, sock: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return node.run(
        PYCNI,
        "doctor",
        "--conf-dir",
        str(state.conf_dir),
        "--plugin-dir",
        str(plugins),
        "--cache-dir",
        str(state.cache_dir),
        "--data-dir",
        str(state.data_dir),
        "--socket",
        sock,
        *extra,
        check=False,
        timeout=180,
    )


def _scratch_namespaces() -> set[str]:
    return {n for n in os.listdir("/run/netns") if n.startswith("pycni-doctor-")}


def _attach(node: harness.Namespace, state: harness.State, plugins: Path, pod: Any) -> None:
    raw = (state.conf_dir / "10-doc.conflist").read_bytes()
    cni = CNIConfig([str(plugins)], cache_dir=str(state.cache_dir))
    with node.entered():
        cni.add_network_list(
            conf_list_from_bytes(raw),
            RuntimeConf(container_id=pod.name, netns=pod.path, ifname="eth0"),
        )


def _detach(node: harness.Namespace, state: harness.State, plugins: Path, pod: Any) -> None:
    raw = (state.conf_dir / "10-doc.conflist").read_bytes()
    cni = CNIConfig([str(plugins)], cache_dir=str(state.cache_dir))
    with node.entered():
        cni.del_network_list(
            conf_list_from_bytes(raw),
            RuntimeConf(container_id=pod.name, netns=pod.path, ifname="eth0"),
        )


def test_healthy_node_is_all_ok(
    node: harness.Namespace,
    tmp_state: harness.State,
    forwarders: tuple[Path, str],
    daemon: str,
    pod_factory: Callable[[], harness.Namespace],
) -> None:
    plugins, _ = forwarders
    scratch_before = _scratch_namespaces()
    body = _conflist(
        NET, tmp_state.data_dir, [{"type": "portmap", "capabilities": {"portMappings": True}}]
    )
    (tmp_state.conf_dir / "10-doc.conflist").write_bytes(body)
    pod = pod_factory()
    _attach(node, tmp_state, plugins, pod)
    try:
        proc = _doctor(node, tmp_state, plugins, daemon, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
        warned = {name for name, c in checks.items() if c["status"] == "warn"}
        assert warned <= MISSING_HERE, {n: checks[n]["detail"] for n in warned - MISSING_HERE}
        assert all(c["status"] in ("ok", "warn") for c in checks.values())
        for name in (
            "kernel: bridge",
            "kernel: veth",
            "kernel: vxlan",
            "kernel: macvlan",
            "kernel: tc",
            "kernel: nf_tables",
            "kernel: conntrack",
            "iptables-legacy",
            "iptables-nft",
            "plugin dirs",
            "daemon",
            "conf dir",
            f"network {NET}",
            "leaks",
        ):
            assert checks[name]["status"] == "ok", checks[name]
        assert checks["daemon"]["answers"] is True and checks["daemon"]["pid"] > 0
        assert checks["daemon"]["forwardingEntryPoints"] > 0
        assert "bridge → portmap installed" in checks[f"network {NET}"]["detail"]
        text = _doctor(node, tmp_state, plugins, daemon)
        assert text.returncode == 0
        assert not [ln for ln in text.stdout.splitlines() if ln.startswith("fail")]
        assert text.stdout.rstrip().endswith("0 fail")
    finally:
        _detach(node, tmp_state, plugins, pod)
    assert _scratch_namespaces() <= scratch_before, "the doctor left its scratch namespace"


def test_stopped_daemon_missing_plugin_and_leak_fail_once_each(
    node: harness.Namespace, tmp_state: harness.State, forwarders: tuple[Path, str]
) -> None:
    plugins, sock = forwarders  # no daemon serves the socket the entry points forward to
    ok = _conflist(NET, tmp_state.data_dir, [])
    (tmp_state.conf_dir / "10-doc.conflist").write_bytes(ok)
    broken = _conflist("doc-broken", tmp_state.data_dir, [{"type": "no-such-plugin"}])
    (tmp_state.conf_dir / "20-broken.conflist").write_bytes(broken)
    store = tmp_state.data_dir / NET
    store.mkdir(parents=True)
    ghost = store / "10.79.0.77"
    ghost.write_bytes(b"ghost-container\r\neth0")
    an_hour_ago = time.time() - 3600  # older than GC's grace period: not an ADD in progress
    os.utime(ghost, (an_hour_ago, an_hour_ago))

    proc = _doctor(node, tmp_state, plugins, sock)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fails = [ln for ln in proc.stdout.splitlines() if ln.startswith("fail")]
    assert len(fails) == 3, proc.stdout
    daemon_line, network_line, leak_line = fails
    assert daemon_line.split()[1] == "daemon" and "pycni daemon --socket" in daemon_line
    assert "network doc-broken" in network_line and "no-such-plugin" in network_line
    assert "leaks" in leak_line and "1 reservation" in leak_line and "pycni cleanup" in leak_line
    assert "network doc-net" in proc.stdout  # the healthy network next to it stays ok

    data = json.loads(_doctor(node, tmp_state, plugins, sock, "--json").stdout)
    assert data["summary"]["fail"] == 3
    failed = {c["name"] for c in data["checks"] if c["status"] == "fail"}
    assert failed == {"daemon", "network doc-broken", "leaks"}


def _doctor_node(node: harness.Namespace, tmp_path: Path, *extra: str) -> Any:
    return node.run(
        PYCNI,
        "doctor",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--data-dir",
        str(tmp_path / "ipam"),
        "--json",
        *extra,
        check=False,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k not in ("CNI_PATH", "NETCONFPATH")},
    )


def test_this_node_with_its_runtimes_is_healthy(node: harness.Namespace, tmp_path: Path) -> None:
    """As `make test` sets the machine up: podman and containerd, the Go plugins in
    /usr/lib/cni, no /opt/cni/bin. Read only: nothing of the real dirs is changed."""
    proc = _doctor_node(node, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["runtime podman"]["status"] == "ok"
    assert checks["runtime containerd"]["status"] == "ok"
    assert "plugin dirs" not in checks  # /opt/cni/bin missing is no fault: nobody looks there
    networks = [c for name, c in checks.items() if name.startswith("network ")]
    assert all(c["status"] == "ok" for c in networks)  # podman's own, once it made one
    assert all("not readable" not in c["detail"] for c in checks.values())


def test_a_plugin_a_runtime_needs_removed_fails(
    node: harness.Namespace, tmp_path: Path, go_plugin_dir: Path
) -> None:
    """A private copy of the runtimes' configs and plugin dir (symlinks to the Go plugins):
    healthy, then one plugin gone is one fail line naming the runtime and the plugin."""
    root, plugins, netd = tmp_path / "root", tmp_path / "bin", tmp_path / "net.d"
    plugins.mkdir()
    for name in ("bridge", "host-local", "portmap", "firewall", "tuning", "loopback"):
        (plugins / name).symlink_to(go_plugin_dir / name)
    netd.mkdir()
    conflist = {
        "cniVersion": "0.4.0",
        "name": "priv",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "priv0",
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.87.0.0/24"}]]},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "firewall"},
            {"type": "tuning"},
        ],
    }
    (netd / "87-priv.conflist").write_text(json.dumps(conflist))
    conf = root / "etc/containers/containers.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f'[network]\ncni_plugin_dirs = ["{plugins}"]\nnetwork_config_dir = "{netd}"\n')
    ctd = root / "etc/containerd/config.toml"
    ctd.parent.mkdir(parents=True)
    ctd.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n'
        f'bin_dir = "{plugins}"\nconf_dir = "{netd}"\n'
    )
    proc = _doctor_node(node, tmp_path, "--runtime-root", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["network priv"]["status"] == "ok"
    assert "found by podman in " + str(plugins) in checks["network priv"]["detail"]

    (plugins / "firewall").unlink()
    proc = _doctor_node(node, tmp_path, "--runtime-root", str(root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [c for c in json.loads(proc.stdout)["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["network priv"]
    assert "podman would fail" in failed[0]["detail"]
    assert 'failed to find plugin "firewall"' in failed[0]["detail"]
    assert str(plugins) in failed[0]["fix"]
