"""podman 4.3 (CNI backend) running containers on pycni's plugins, compared with the Go ones.

Each plugin set gets its own podman state, network (``podman network create``: bridge +
portmap + firewall + tuning, cniVersion 0.4.0), bridge name and subnet. The host side of the
containers is the machine's own namespace (a real runtime cannot be pointed elsewhere), so the
module snapshots that namespace first and removes whatever the plugins left there afterwards.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.interop.runtimes import hostnet, timings
from tests.interop.runtimes.hostnet import CNI_STATE, RootSnapshot
from tests.interop.runtimes.image import IMAGE_NAME, INDEX_HTML
from tests.interop.runtimes.plugins import KINDS, PluginSet, plugin_set
from tests.interop.runtimes.podman import Podman

pytestmark = [pytest.mark.kernel, pytest.mark.interop, pytest.mark.slow]

RUN_ID = os.getpid() % 10000
BRIDGE_PREFIX = f"pcpm{RUN_ID}"
LOOP_CONTAINERS = 10  # 20 took twice as long and checked the same things


@dataclass
class Setup:
    plugins: PluginSet
    podman: Podman
    network: str
    bridge: str
    subnet_prefix: str

    def reservations(self) -> list[str]:
        d = CNI_STATE / "networks" / self.network
        if not d.exists():
            return []
        return sorted(p.name for p in d.iterdir() if p.name.startswith(self.subnet_prefix))

    def cached_results(self) -> list[str]:
        return hostnet.cached_results(self.network)

    def bridge_ports(self) -> list[str]:
        return hostnet.bridge_ports(self.bridge)


@pytest.fixture(scope="module", params=KINDS)
def setup(
    request: pytest.FixtureRequest,
    root_state: RootSnapshot,
    image: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    kind = str(request.param)
    index = KINDS.index(kind)
    timings.report_at_end(request.config)
    scratch = tmp_path_factory.mktemp(f"podman-{kind}")
    with plugin_set(kind, scratch) as plugins:
        podman = Podman(scratch / "podman", plugins.directory)
        network = f"pcni{RUN_ID}{kind}"
        subnet_prefix = f"10.123.{40 + index}."
        bridge = f"{BRIDGE_PREFIX}{index}"
        try:
            podman.load_image(image)
            podman.create_network(network, f"{subnet_prefix}0/24", bridge)
            yield Setup(plugins, podman, network, bridge, subnet_prefix)
        finally:
            podman.close()
    assert not (CNI_STATE / "networks" / network).exists() or not any(
        p.name.startswith(subnet_prefix) for p in (CNI_STATE / "networks" / network).iterdir()
    ), "an address of a removed container is still reserved"
    assert bridge not in hostnet.root_links(), "podman network rm left the bridge"


def test_hostport_answers_on_loopback_and_node_address(setup: Setup) -> None:
    port = hostnet.free_port()
    calls_before = setup.plugins.daemon_calls()
    cid = setup.podman.start_httpd("web", setup.network, "-p", f"{port}:80")
    try:
        address = setup.podman.address(cid, setup.network)
        assert address.startswith(setup.subnet_prefix)
        assert setup.reservations() == [address]
        assert len(setup.cached_results()) == 1
        assert hostnet.http_get("127.0.0.1", port) == INDEX_HTML.decode()
        assert hostnet.http_get(hostnet.node_address(), port) == INDEX_HTML.decode()
        assert hostnet.http_get(address, 80) == INDEX_HTML.decode()
    finally:
        setup.podman.remove(cid)
    assert setup.reservations() == [], "podman rm did not release the address"
    assert setup.cached_results() == []
    assert setup.bridge_ports() == []
    if setup.plugins.kind == "daemon":
        # bridge, host-local (in the same call), portmap, firewall, tuning: ADD and DEL
        assert setup.plugins.daemon_calls() - calls_before >= 8, "the daemon was not used"


def test_two_containers_reach_each_other(setup: Setup) -> None:
    first = setup.podman.start_httpd("one", setup.network)
    second = setup.podman.start_httpd("two", setup.network)
    try:
        a, b = (setup.podman.address(c, setup.network) for c in (first, second))
        assert a != b
        assert sorted(setup.reservations()) == sorted([a, b])
        for src, dst in ((first, b), (second, a)):
            # busybox-static's wget crashes in static glibc's resolver; nc speaks HTTP fine
            request = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {dst} 80"
            reply = setup.podman.run("exec", src, "sh", "-c", request)
            assert reply.startswith("HTTP/1.") and reply.endswith(INDEX_HTML.decode()), reply
    finally:
        setup.podman.remove(first, second)
    assert setup.reservations() == []


def test_static_ip_and_mac_reach_the_plugins(setup: Setup) -> None:
    """--ip goes to host-local as runtimeConfig.ips, --mac-address to bridge as CNI_ARGS MAC."""
    ip, mac = f"{setup.subnet_prefix}77", "02:42:0a:7b:00:4d"
    cid = setup.podman.start_httpd("fixed", setup.network, "--ip", ip, "--mac-address", mac)
    try:
        assert setup.podman.address(cid, setup.network) == ip
        assert setup.reservations() == [ip]
        link = setup.podman.run("exec", cid, "cat", "/sys/class/net/eth0/address").strip()
        assert link == mac
        shown = setup.podman.run("exec", cid, "ip", "-4", "-o", "addr", "show", "eth0")
        assert f"inet {ip}/24" in shown
    finally:
        setup.podman.remove(cid)
    assert setup.reservations() == []


def test_ten_containers_leave_nothing_behind(setup: Setup) -> None:
    """10 containers with a port mapping each, all up at once, then removed together."""
    kind = "Go" if setup.plugins.kind == "go" else f"pycni {setup.plugins.kind}"
    warm = setup.podman.start_httpd("warm", setup.network, "-p", f"{hostnet.free_port()}:80")
    setup.podman.remove(warm)
    rules_before = hostnet.firewall_state()
    ports = hostnet.free_ports(LOOP_CONTAINERS)
    ids = []
    for i, port in enumerate(ports):
        start = time.perf_counter()
        ids.append(setup.podman.start_httpd(f"loop{i}", setup.network, "-p", f"{port}:80"))
        timings.record(f"podman run -d -p, one of {LOOP_CONTAINERS} up ({kind})", since(start))
    assert len(set(setup.reservations())) == LOOP_CONTAINERS
    assert len(setup.bridge_ports()) == LOOP_CONTAINERS
    for port in (ports[0], ports[-1]):
        assert hostnet.http_get("127.0.0.1", port) == INDEX_HTML.decode()
    start = time.perf_counter()
    setup.podman.remove(*ids)
    timings.record(f"podman rm -f of {LOOP_CONTAINERS} containers at once ({kind})", since(start))
    assert setup.reservations() == []
    assert setup.cached_results() == []
    assert setup.bridge_ports() == []
    assert setup.podman.run("ps", "-a", "-q") == ""
    assert hostnet.firewall_state() == rules_before, "the containers left firewall rules behind"


def test_run_timings(setup: Setup) -> None:
    """Whole ``podman run --rm … true``: no network, the CNI network, and with a port mapping."""
    label = "Go" if setup.plugins.kind == "go" else f"pycni {setup.plugins.kind}"
    cases: dict[str, tuple[str, ...]] = {
        f"podman run --rm, CNI network ({label})": ("--network", setup.network),
        f"podman run --rm, CNI network + -p ({label})": (
            "--network",
            setup.network,
            "-p",
            f"{hostnet.free_port()}:80",
        ),
    }
    if setup.plugins.kind == "go":
        cases["podman run --rm, --network none"] = ("--network", "none")
    measured: dict[str, list[float]] = {}
    for name, args in cases.items():
        for _ in range(5 if setup.plugins.kind != "inprocess" else 3):
            ms = setup.podman.timed("run", "--rm", *args, IMAGE_NAME, "true")
            measured.setdefault(name, []).append(ms)
            timings.record(name, ms)
    assert setup.reservations() == []
    assert all(statistics.median(v) > 0 for v in measured.values())


def since(start: float) -> float:
    return (time.perf_counter() - start) * 1000
