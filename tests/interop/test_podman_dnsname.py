"""podman 4.3 (CNI backend) with DNS: containers find each other by name through dnsname.

``podman network create`` (DNS enabled) adds the dnsname plugin to the conflist because the
plugin dir has one; each plugin set (the Go reference, pycni in-process, pycni's daemon) gets
its own podman state, network, bridge and subnet. dnsname writes where podman's environment
makes it write (``/run/containers/cni/dnsname`` for root without XDG_RUNTIME_DIR), so the module
removes this network's directories, any dnsmasq of it and the reference's firewall rule at the
end, and fails when the pycni plugins left any of them behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pycni.plugins.meta.dnsname import files
from tests.interop.runtimes.hostnet import RootSnapshot
from tests.interop.runtimes.plugins import KINDS, PluginSet, plugin_set
from tests.interop.runtimes.podman import Podman

pytestmark = [pytest.mark.kernel, pytest.mark.interop, pytest.mark.slow]

RUN_ID = os.getpid() % 10000
BRIDGE_PREFIX = f"pcdn{RUN_ID}"
BASE = files.base_dir(os.environ)
DOMAIN = "dns.podman"


def dnsmasq_of(conf: Path) -> list[int]:
    """Live dnsmasq processes started with ``--conf-file=<conf>``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"dnsmasq") and f"--conf-file={conf}".encode() in argv:
            out.append(int(entry))
    return out


@dataclass
class Setup:
    plugins: PluginSet
    podman: Podman
    network: str
    bridge: str
    gateway: str

    @property
    def net_dir(self) -> Path:
        return BASE / self.network

    def dnsmasq(self) -> list[int]:
        return dnsmasq_of(self.net_dir / "dnsmasq.conf")

    def lookup(self, container: str, name: str) -> list[str]:
        """Addresses busybox's nslookup in ``container`` gets via its resolv.conf."""
        out = self.podman.run("exec", container, "nslookup", "-type=a", name, check=False)
        found, addrs = False, []
        for line in out.splitlines():
            if line.startswith("Name:"):
                found = True
            elif found and line.startswith("Address:"):
                addrs.append(line.split()[-1])
        return addrs

    def wait_lookup(self, container: str, name: str, expected: list[str]) -> list[str]:
        deadline = time.monotonic() + 20
        while True:
            got = self.lookup(container, name)
            if got == expected or time.monotonic() > deadline:
                return got
            time.sleep(0.3)


def _remove_accept_rules(bridge: str) -> int:
    rule = ["INPUT", "-i", bridge, "-p", "udp", "-m", "udp", "--dport", "53", "-j", "ACCEPT"]
    removed = 0
    while subprocess.run(["iptables", "-D", *rule], capture_output=True).returncode == 0:
        removed += 1
    return removed


def _cleanup(setup: Setup, created_dirs: list[Path]) -> list[str]:
    """Remove what dnsname may have left for this network; returns what was there."""
    left = []
    for pid in setup.dnsmasq():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        left.append(f"dnsmasq {pid}")
    for path in (setup.net_dir, BASE.parent / files.RECORDS_DIR / setup.network):
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
            left.append(str(path))
    if _remove_accept_rules(setup.bridge):
        left.append(f"iptables accept rule for {setup.bridge}")
    for directory in created_dirs:  # deepest first; only when empty
        with contextlib.suppress(OSError):
            directory.rmdir()
    return left


@pytest.fixture(scope="module", params=KINDS)
def setup(
    request: pytest.FixtureRequest,
    root_state: RootSnapshot,
    image: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    kind = str(request.param)
    index = KINDS.index(kind)
    chain = [BASE.parent / files.RECORDS_DIR, BASE, BASE.parent, BASE.parent.parent]
    created_dirs = [d for d in chain if not d.exists()]
    scratch = tmp_path_factory.mktemp(f"podman-dns-{kind}")
    network = f"pcdn{RUN_ID}{kind}"
    subnet_prefix = f"10.123.{60 + index}."
    with plugin_set(kind, scratch) as plugins:
        podman = Podman(scratch / "podman", plugins.directory)
        setup = Setup(plugins, podman, network, f"{BRIDGE_PREFIX}{index}", f"{subnet_prefix}1")
        try:
            podman.load_image(image)
            conflist = podman.create_network(
                network, f"{subnet_prefix}0/24", setup.bridge, dns=True
            )
            plugin_list = conflist["plugins"]
            assert isinstance(plugin_list, list)
            assert plugin_list[-1] == {
                "type": "dnsname",
                "domainName": DOMAIN,
                "capabilities": {"aliases": True},
            }
            yield setup
        finally:
            podman.close()
            left = _cleanup(setup, created_dirs)
    if kind != "go":  # the reference leaves its firewall rule behind; pycni must leave nothing
        assert left == [], f"dnsname left {left}"


def test_containers_resolve_each_other_by_name_and_alias(setup: Setup) -> None:
    a = setup.podman.start_httpd("dnsa", setup.network)
    b = setup.podman.start_httpd("dnsb", setup.network, "--network-alias", "bee")
    running = [a, b]
    try:
        addr_a = setup.podman.address(a, setup.network)
        addr_b = setup.podman.address(b, setup.network)
        resolv = setup.podman.run("exec", a, "cat", "/etc/resolv.conf")
        assert f"nameserver {setup.gateway}" in resolv and DOMAIN in resolv, resolv
        for name in ("dnsb", f"dnsb.{DOMAIN}", "bee"):
            assert setup.wait_lookup(a, name, [addr_b]) == [addr_b], name
        assert setup.wait_lookup(b, "dnsa", [addr_a]) == [addr_a]
        (pid,) = setup.dnsmasq()
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:-1] == [
            b"-u",
            b"root",
            f"--conf-file={setup.net_dir / 'dnsmasq.conf'}".encode(),
        ]
        hosts = {
            line.split("\t")[1]: line.split("\t")
            for line in (setup.net_dir / "addnhosts").read_text().splitlines()
        }
        # podman adds the short container id to the aliases
        assert set(hosts) == {"dnsa", "dnsb"}
        assert hosts["dnsa"][0] == addr_a and hosts["dnsa"][2:] == [a[:12]]
        assert hosts["dnsb"][0] == addr_b and sorted(hosts["dnsb"][2:]) == sorted(["bee", b[:12]])
        assert setup.wait_lookup(a, b[:12], [addr_b]) == [addr_b]

        setup.podman.remove(b)
        running.remove(b)
        assert setup.wait_lookup(a, "dnsb", []) == []
        assert setup.lookup(a, "bee") == []
        assert setup.lookup(a, "dnsa") == [addr_a]
        assert len(setup.dnsmasq()) == 1
    finally:
        setup.podman.remove(*running)
    deadline = time.monotonic() + 10
    while setup.dnsmasq() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert setup.dnsmasq() == [], "dnsmasq still runs after the last container went"
    assert not setup.net_dir.exists()
