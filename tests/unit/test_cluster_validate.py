"""What the agent accepts from etcd: lease values, lease subnets against the node's facts,
etcd endpoints and credentials, and the subnet file's readiness (pure logic)."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import pytest

from pycni.cluster import subnet as sn
from pycni.cluster import validate
from pycni.cluster.etcd import Etcd, EtcdCredentials, EtcdError, parse_endpoints
from pycni.cluster.lease import MAX_LEASE_VALUE, BadLease, LeaseInfo

N = ipaddress.IPv4Network
A = ipaddress.IPv4Address
MAC = "02:42:ac:11:00:02"


def view(backend: str = "vxlan", **changes: object) -> validate.NodeView:
    base: dict[str, object] = {
        "network": sn.NetworkConfig.parse("10.244.0.0/16", 24),
        "own": N("10.244.5.0/24"),
        "backend_type": backend,
        "public_ip": A("10.99.0.11"),
        "underlay_networks": (N("10.99.0.0/24"),),
        "foreign_routes": ((N("10.244.77.0/24"), "10.244.77.0/24 via 10.99.0.1 proto 4"),),
        "vni": 1 if backend == "vxlan" else None,
    }
    base.update(changes)
    return validate.NodeView(**base)  # type: ignore[arg-type]


def info(backend: str = "vxlan", ip: str = "10.99.0.12", **data: object) -> LeaseInfo:
    backend_data = {"VNI": 1, "VtepMAC": MAC, **data} if backend == "vxlan" else dict(data)
    return LeaseInfo(A(ip), backend, backend_data)


def test_a_good_lease_passes() -> None:
    assert validate.lease_problem(N("10.244.9.0/24"), info(), view()) is None
    assert validate.lease_problem(N("10.244.9.0/24"), info("host-gw"), view("host-gw")) is None


@pytest.mark.parametrize(
    ("subnet", "lease", "node", "reason"),
    [
        ("0.0.0.0/0", info(), view(), "prefix length /0"),
        ("10.244.5.128/25", info(), view(), "prefix length /25"),
        ("10.244.8.0/23", info(), view(), "prefix length /23"),
        ("10.245.1.0/24", info(), view(), "outside the cluster network"),
        ("10.244.0.0/24", info(), view(), "outside the leasable range"),
        ("10.244.5.0/24", info(), view(own=N("10.244.4.0/22")), "overlaps this node's subnet"),
        (
            "10.244.99.0/24",
            info(),
            view(underlay_networks=(N("10.244.99.0/24"),)),
            "overlaps the underlay",
        ),
        ("10.244.77.0/24", info(), view(), "overlaps the route 10.244.77.0/24"),
        ("10.244.9.0/24", info(ip="0.0.0.0"), view(), "not a unicast node address"),
        ("10.244.9.0/24", info(ip="127.0.0.1"), view(), "not a unicast node address"),
        ("10.244.9.0/24", info(ip="224.0.0.5"), view(), "not a unicast node address"),
        ("10.244.9.0/24", info(ip="255.255.255.255"), view(), "not a unicast node address"),
        ("10.244.9.0/24", info(ip="10.244.7.1"), view(), "inside the cluster network"),
        ("10.244.9.0/24", info(ip="10.99.0.11"), view(), "this node's own address"),
        ("10.244.9.0/24", info("host-gw"), view(), "this node runs vxlan"),
        (
            "10.244.9.0/24",
            info("host-gw", ip="192.0.2.7"),
            view("host-gw"),
            "not on this node's underlay",
        ),
        ("10.244.9.0/24", info(VtepMAC="zz:zz:zz:zz:zz:zz"), view(), "not a MAC address"),
        ("10.244.9.0/24", info(VtepMAC="ff:ff:ff:ff:ff:ff"), view(), "multicast/broadcast"),
        ("10.244.9.0/24", info(VtepMAC="00:00:00:00:00:00"), view(), "all zeros"),
        ("10.244.9.0/24", info(VtepMAC=["x"]), view(), "not a MAC address"),
        ("10.244.9.0/24", info(VNI=7), view(), "VNI '7'"),
    ],
)
def test_bad_leases_are_named(
    subnet: str, lease: LeaseInfo, node: validate.NodeView, reason: str
) -> None:
    problem = validate.lease_problem(N(subnet), lease, node)
    assert problem is not None and reason in problem, problem


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b"{}", "PublicIP is missing"),
        (b'{"PublicIP": "10.0.0.0/8"}', "not an IP address"),
        (b'{"PublicIP": "10.0.0.1", "BackendData": [1]}', "BackendData an object"),
        (json.dumps({"PublicIP": "10.0.0.1", "x": "y" * MAX_LEASE_VALUE}).encode(), "bytes"),
    ],
)
def test_malformed_lease_values(raw: bytes, reason: str) -> None:
    with pytest.raises(BadLease, match=reason):
        LeaseInfo.parse(raw)


def test_each_bad_lease_version_is_reported_once() -> None:
    seen = validate.Rejections()
    assert seen.fresh([("/p/a", 5, "bad")]) == ["ignoring lease /p/a: bad"]
    assert seen.fresh([("/p/a", 5, "bad")]) == []
    assert seen.fresh([("/p/a", 6, "worse")]) == ["ignoring lease /p/a: worse"]
    flood = [(f"/p/{i}", 1, "bad") for i in range(100)]
    lines = seen.fresh(flood)
    assert len(lines) == validate.MAX_REPORTS_PER_PASS + 1
    assert lines[-1] == f"ignoring {100 - validate.MAX_REPORTS_PER_PASS} more bad leases"
    assert validate.safe_key("/p/\x1b[31m\n") == "/p/?[31m?"


def test_endpoints() -> None:
    eps = parse_endpoints("https://10.0.0.1:2379, http://etcd.local ,")
    assert [(e.https, e.host, e.port) for e in eps] == [
        (True, "10.0.0.1", 2379),
        (False, "etcd.local", 2379),
    ]
    for bad in ("ftp://x:1", "http://user:pw@x:1", "http://x:1/v3", "http://x:99999", "", "x"):
        with pytest.raises(EtcdError):
            parse_endpoints(bad)


def test_credentials_need_https() -> None:
    with pytest.raises(EtcdError, match="clear text"):
        Etcd("http://10.0.0.1:2379", credentials=EtcdCredentials(username="u", password="p"))
    with pytest.raises(EtcdError, match="clear text"):
        Etcd("https://a:1,http://b:1", credentials=EtcdCredentials(certfile="/x"))
    with pytest.raises(EtcdError, match="needs a password"):
        Etcd("https://a:1", credentials=EtcdCredentials(username="u"))
    with pytest.raises(EtcdError, match="TLS files"):
        Etcd("https://a:1", credentials=EtcdCredentials(cafile="/nonexistent/ca.pem"))
    # a CA file with a plain endpoint is an error, not plain text without a word
    for endpoints in ("http://10.0.0.1:2379", "https://a:1,http://b:1"):
        with pytest.raises(EtcdError, match=r"--etcd-cafile is given but http://") as exc:
            Etcd(endpoints, credentials=EtcdCredentials(cafile="/nonexistent/ca.pem"))
        assert "clear text" in str(exc.value)


def test_readiness_of_the_subnet_file(tmp_path: Path) -> None:
    path = tmp_path / "subnet.env"
    state = sn.readiness(str(path))
    assert not state.ready and state.problem == "missing" and "no subnet file" in state.reason
    env = sn.SubnetEnv(N("10.244.0.0/16"), N("10.244.5.0/24"), 1450, True, fresh_for=30)
    sn.write_subnet_env(str(path), env)
    assert "PYCNI_FRESH_FOR=30" in path.read_text()
    state = sn.readiness(str(path))
    assert state.ready and state.env == env
    old = path.stat().st_mtime - 31
    os.utime(path, (old, old))
    state = sn.readiness(str(path))
    assert not state.ready and state.problem == "stale" and "not running" in state.reason
    # flannel's own file has no freshness: present is ready
    path.write_text(env.render().replace("PYCNI_FRESH_FOR=30\n", ""))
    os.utime(path, (old, old))
    assert sn.readiness(str(path)).ready
    path.write_text("FLANNEL_MTU=1\n")
    assert sn.readiness(str(path)).problem == "unusable"


def test_ipv6_networks_and_keys() -> None:
    config = sn.NetworkConfig.parse("fd10:244::/56", 64, version=6)
    subnets = config.subnets()
    assert [str(next(subnets)) for _ in range(2)] == ["fd10:244:0:1::/64", "fd10:244:0:2::/64"]
    assert config.contains(ipaddress.IPv6Network("fd10:244:0:ff::/64"))
    assert not config.contains(ipaddress.IPv6Network("fd10:244:0:100::/64"))
    assert not config.contains(N("10.244.1.0/24"))
    key = sn.key_of(ipaddress.IPv6Network("fd10:244:0:1::/64"))
    assert key == "fd10:244:0:1::-64"
    assert sn.subnet_of_key(f"/p/subnets/{key}") == ipaddress.IPv6Network("fd10:244:0:1::/64")
    assert sn.subnet_of_key("/p/subnets/fd10::1-64") is None  # not aligned
    with pytest.raises(sn.SubnetError, match="IPv6"):
        sn.NetworkConfig.parse("10.0.0.0/8", 24, version=6)
    with pytest.raises(sn.SubnetError, match="at most 126"):
        sn.NetworkConfig.parse("fd10::/64", 127, version=6)


def test_cluster_config_in_flannels_keys() -> None:
    v4 = sn.NetworkConfig.parse("10.244.0.0/16", 24)
    v6 = sn.NetworkConfig.parse("fd10:244::/56", 64, version=6)
    dual = sn.ClusterConfig(v4, v6)
    assert dual.to_json() == {
        "Network": "10.244.0.0/16",
        "SubnetLen": 24,
        "EnableIPv6": True,
        "IPv6Network": "fd10:244::/56",
        "IPv6SubnetLen": 64,
    }
    assert sn.ClusterConfig.from_json(dual.to_json()).same_as(dual)
    only6 = sn.ClusterConfig(None, v6)
    assert only6.to_json()["EnableIPv4"] is False
    assert sn.ClusterConfig.from_json(only6.to_json()).same_as(only6)
    assert not only6.same_as(dual)
    assert sn.ClusterConfig.from_json({"Network": "10.244.0.0/16"}).same_as(sn.ClusterConfig(v4))
    with pytest.raises(sn.SubnetError):
        sn.ClusterConfig(None, None)


def test_dual_stack_and_ipv6_only_subnet_files() -> None:
    env = sn.SubnetEnv(
        N("10.244.0.0/16"),
        N("10.244.5.0/24"),
        1430,
        True,
        ipv6_network=ipaddress.IPv6Network("fd10:244::/56"),
        ipv6_subnet=ipaddress.IPv6Network("fd10:244:0:5::/64"),
    )
    text = env.render()
    assert "FLANNEL_IPV6_NETWORK=fd10:244::/56\n" in text
    assert "FLANNEL_IPV6_SUBNET=fd10:244:0:5::1/64\n" in text
    assert sn.SubnetEnv.parse(text) == env
    only6 = sn.SubnetEnv.parse(
        "FLANNEL_IPV6_NETWORK=fd10:244::/56\nFLANNEL_IPV6_SUBNET=fd10:244:0:5::1/64\n"
        "FLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n"
    )
    assert only6.network is None and [str(s) for _n, s in only6.pairs] == ["fd10:244:0:5::/64"]
    assert str(only6.gateway) == "fd10:244:0:5::1/64"
    with pytest.raises(sn.SubnetError, match="must be IPv6"):
        sn.SubnetEnv.parse(
            "FLANNEL_IPV6_NETWORK=10.0.0.0/8\nFLANNEL_IPV6_SUBNET=10.0.0.1/24\n"
            "FLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n"
        )
    with pytest.raises(sn.SubnetError, match="not inside"):
        sn.SubnetEnv.parse(
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.9.0.1/24\n"
            "FLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n"
        )


def test_leases_of_the_other_family_are_refused() -> None:
    v6_lease = LeaseInfo(ipaddress.IPv6Address("fd99::12"), "vxlan", {"VNI": 1, "VtepMAC": MAC})
    problem = validate.lease_problem(ipaddress.IPv6Network("fd10:244:0:9::/64"), v6_lease, view())
    assert problem is not None and "IPv6 subnet" in problem
    problem = validate.lease_problem(N("10.244.9.0/24"), v6_lease, view())
    assert problem is not None and "underlay family" in problem


def test_agent_options_come_from_flags_then_flannels_environment() -> None:
    import argparse

    from pycni.cli import agent_cmd

    parser = argparse.ArgumentParser()
    agent_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["agent", "--etcd-cafile", "/flag/ca.pem"])
    agent_cmd.resolve(
        args,
        {
            "FLANNELD_ETCD_ENDPOINTS": "https://a:2379,https://b:2379",
            "FLANNELD_ETCD_CAFILE": "/env/ca.pem",
            "FLANNELD_ETCD_PASSWORD": "pw",
        },
    )
    assert args.etcd_endpoints == "https://a:2379,https://b:2379"
    assert args.etcd_cafile == "/flag/ca.pem"  # the flag wins
    assert args.etcd_password == "pw"
    assert args.etcd_username == "" and args.subnet_file == "/run/flannel/subnet.env"


def test_hostile_bytes_never_raise_anything_but_bad_lease() -> None:
    for raw in (b"[" * 10000, b"\xff\xfe\x00garbage", b'{"PublicIP": "\\ud800"}'):
        with pytest.raises(BadLease):
            LeaseInfo.parse(raw)
    from pycni.cluster.etcd import KeyValue

    kv = KeyValue.from_json({"key": "L3Av/w==", "value": ""})  # "/p/\xff"
    assert kv.key == "/p/\ufffd" and sn.subnet_of_key(kv.key) is None


@pytest.mark.parametrize(
    ("ip", "node", "reason"),
    [
        ("10.99.0.255", view(), "broadcast address of the underlay 10.99.0.0/24"),
        ("10.99.0.0", view(), "network address of the underlay 10.99.0.0/24"),
        ("255.255.255.255", view(), "not a unicast node address"),
        ("10.99.0.12", view(local_addresses=frozenset({A("10.99.0.12")})), "address of this"),
        ("10.98.255.255", view(special_addresses=frozenset({A("10.98.255.255")})), "broadcast"),
    ],
)
def test_no_broadcast_network_or_own_address_as_public_ip(
    ip: str, node: validate.NodeView, reason: str
) -> None:
    problem = validate.lease_problem(N("10.244.9.0/24"), info(ip=ip), node)
    assert problem is not None and reason in problem, problem
    # a /31 underlay has no broadcast or network address: both ends are nodes
    p2p = view(underlay_networks=(N("10.99.0.0/31"),), public_ip=A("10.99.0.1"))
    assert validate.lease_problem(N("10.244.9.0/24"), info(ip="10.99.0.0"), p2p) is None
