"""Node subnet allocation, lease keys and flannel's subnet.env (pure logic)."""

from __future__ import annotations

import ipaddress
import random
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pycni.cluster import subnet as sn
from pycni.cluster.etcd import prefix_end
from pycni.cluster.lease import LeaseInfo

N = ipaddress.IPv4Network


def test_subnets_skip_the_networks_first_one() -> None:
    config = sn.NetworkConfig.parse("10.244.0.0/22", 24)
    assert [str(s) for s in config.subnets()] == ["10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"]
    assert config.contains(N("10.244.3.0/24"))
    assert not config.contains(N("10.244.0.0/24"))
    assert not config.contains(N("10.244.4.0/24"))
    assert not config.contains(N("10.244.2.0/25"))


@pytest.mark.parametrize(
    ("network", "length", "message"),
    [
        ("10.244.0.0/16", 16, "longer than"),
        ("10.244.0.0/16", 31, "at most 30"),
        ("10.244.0.1/16", 24, "bad cluster network"),
        ("fd00::/64", 80, "IPv4"),
        ("nonsense", 24, "bad cluster network"),
    ],
)
def test_bad_network_configs(network: str, length: int, message: str) -> None:
    with pytest.raises(sn.SubnetError, match=message):
        sn.NetworkConfig.parse(network, length)


def test_choose_free_never_returns_a_taken_subnet() -> None:
    config = sn.NetworkConfig.parse("10.244.0.0/28", 30)  # three leasable /30s
    taken = [N("10.244.0.4/30"), N("10.244.0.12/30")]
    for seed in range(20):
        assert sn.choose_free(config, taken, random.Random(seed)) == N("10.244.0.8/30")


def test_exhausted_network_is_an_error() -> None:
    config = sn.NetworkConfig.parse("10.244.0.0/29", 30)
    with pytest.raises(sn.SubnetError, match=re.escape("no free /30 left in 10.244.0.0/29")):
        sn.choose_free(config, [N("10.244.0.4/30")])


@given(st.integers(17, 28), st.sets(st.integers(0, 255), max_size=40), st.integers(0, 1000))
def test_choice_is_inside_free_and_aligned(length: int, used: set[int], seed: int) -> None:
    config = sn.NetworkConfig.parse("10.96.0.0/16", length)
    all_subnets = list(config.subnets())
    taken = [all_subnets[i % len(all_subnets)] for i in used]
    if len(set(taken)) == len(all_subnets):
        return
    chosen = sn.choose_free(config, taken, random.Random(seed))
    assert chosen not in taken
    assert config.contains(chosen) and chosen.subnet_of(config.network)


def test_lease_keys_round_trip() -> None:
    subnet = N("10.244.17.0/24")
    assert sn.key_of(subnet) == "10.244.17.0-24"
    assert sn.subnet_of_key("/pycni.dev/network/subnets/10.244.17.0-24") == subnet
    assert sn.subnet_of_key("/x/subnets/10.244.17.1-24") is None  # not aligned
    assert sn.subnet_of_key("/x/subnets/garbage") is None


def test_subnet_env_render_and_parse() -> None:
    env = sn.SubnetEnv(N("10.244.0.0/16"), N("10.244.5.0/24"), 1450, True)
    text = env.render()
    assert text == (
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\n"
        "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    )
    assert sn.SubnetEnv.parse(text) == env
    # flannel's own files may carry extra keys and quotes
    extra = '# by flannel\nFLANNEL_IPV6_NETWORK=""\n' + text.replace("=1450", '="1450"')
    assert sn.SubnetEnv.parse(extra) == env


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FLANNEL_NETWORK=10.0.0.0/8\n", "missing FLANNEL_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ"),
        ("just words\n", "not KEY=VALUE"),
        (
            "FLANNEL_NETWORK=10.0.0.0/8\nFLANNEL_SUBNET=10.1.0.1/24\nFLANNEL_MTU=x\n"
            "FLANNEL_IPMASQ=true\n",
            "bad value",
        ),
        (
            "FLANNEL_NETWORK=10.0.0.0/8\nFLANNEL_SUBNET=10.1.0.1/24\nFLANNEL_MTU=1500\n"
            "FLANNEL_IPMASQ=yes\n",
            "true or false",
        ),
    ],
)
def test_subnet_env_errors(text: str, message: str) -> None:
    with pytest.raises(sn.SubnetError, match=message):
        sn.SubnetEnv.parse(text)


def test_write_subnet_env_is_atomic_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "run" / "subnet.env"
    env = sn.SubnetEnv(N("10.244.0.0/16"), N("10.244.9.0/24"), 1500, False)
    sn.write_subnet_env(str(path), env)
    assert sn.read_subnet_env(str(path)) == env
    assert [p.name for p in path.parent.iterdir()] == ["subnet.env"]


def test_lease_info_json_and_prefix_end() -> None:
    info = LeaseInfo(ipaddress.IPv4Address("10.99.0.11"), "vxlan", {"VtepMAC": "aa:bb:cc:dd:ee:ff"})
    assert LeaseInfo.from_json(info.to_json()) == info
    assert LeaseInfo.from_json(b"{}") is None
    assert LeaseInfo.from_json(b"not json") is None
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
