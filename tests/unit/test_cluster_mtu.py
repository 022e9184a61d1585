"""The pod MTU: the underlay's minus the backend's overhead for the underlay's family, or
the operator's --mtu when the data path can carry it."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from pycni.cluster.agent import AgentError, make_backend
from pycni.cluster.backend import Underlay


def _underlay(address: str, mtu: int = 1500) -> Underlay:
    return Underlay("eth0", 2, ipaddress.ip_address(address), mtu)


@pytest.mark.parametrize(
    ("kind", "address", "mtu", "pod_mtu"),
    [
        ("vxlan", "10.99.0.11", 1500, 1450),
        ("vxlan", "fd99::11", 1500, 1430),
        ("vxlan", "10.99.0.11", 9000, 8950),
        ("vxlan", "fd99::11", 9000, 8930),
        ("host-gw", "10.99.0.11", 1500, 1500),
        ("host-gw", "fd99::11", 9000, 9000),
    ],
)
def test_computed_from_the_underlay_and_its_family(
    kind: str, address: str, mtu: int, pod_mtu: int
) -> None:
    assert make_backend(kind, _underlay(address, mtu), vni=1).pod_mtu() == pod_mtu


def test_overridden_within_what_the_data_path_carries() -> None:
    assert make_backend("vxlan", _underlay("fd99::11"), vni=1, mtu=1400).pod_mtu() == 1400
    assert make_backend("vxlan", _underlay("fd99::11"), vni=1, mtu=1430).pod_mtu() == 1430
    assert make_backend("host-gw", _underlay("10.99.0.11"), vni=1, mtu=1280).pod_mtu() == 1280
    with pytest.raises(AgentError, match=r"carries at most 1430; give 1280\.\.1430"):
        make_backend("vxlan", _underlay("fd99::11"), vni=1, mtu=1431)
    with pytest.raises(AgentError, match=r"carries at most 1450; give 576\.\.1450"):
        make_backend("vxlan", _underlay("10.99.0.11"), vni=1, mtu=1451)
    with pytest.raises(AgentError, match="give 1280"):  # IPv6 needs at least 1280
        make_backend("host-gw", _underlay("fd99::11"), vni=1, mtu=1279)


@pytest.mark.parametrize(
    ("kind", "address", "pod_mtu"),
    [
        ("wireguard", "10.99.0.11", 1440),  # outer IPv4 20 + UDP 8 + WireGuard 32
        ("wireguard", "fd99::11", 1420),  # a 40-byte outer header
        ("ipip", "10.99.0.11", 1480),  # the outer IPv4 header
    ],
)
def test_tunnels(kind: str, address: str, pod_mtu: int, tmp_path: Path) -> None:
    key_file = f"{tmp_path}/wgkey"
    backend = make_backend(kind, _underlay(address), vni=1, wg_key_file=key_file)
    assert backend.pod_mtu() == pod_mtu
    with pytest.raises(AgentError, match=f"carries at most {pod_mtu}"):
        make_backend(kind, _underlay(address), vni=1, mtu=pod_mtu + 1, wg_key_file=key_file)


def test_ipip_is_ipv4_only_and_a_bad_key_file_is_an_agent_error(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="ipip backend carries IPv4 only"):
        make_backend("ipip", _underlay("fd99::11"), vni=1)
    bad = f"{tmp_path}/wgkey"
    with open(bad, "w") as f:
        f.write("x")
    with pytest.raises(AgentError, match=r"readable by it alone|does not hold"):
        make_backend("wireguard", _underlay("10.99.0.11"), vni=1, wg_key_file=bad)
