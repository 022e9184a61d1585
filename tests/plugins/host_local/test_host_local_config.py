"""host-local configuration: defaults, canonical form, and every validation error."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

import pytest

from pycni.net import ipmath, resolvconf
from pycni.plugins.ipam.host_local.config import DEFAULT_DATA_DIR, IPAMConfig, load
from pycni.spec.errors import CNIError


def conf(ipam: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "net", "ipam": {"type": "host-local", **ipam}, **top}


def load_ok(ipam: dict[str, Any], env_args: str = "", **top: Any) -> IPAMConfig:
    return load(conf(ipam, **top), env_args)


def load_err(ipam: dict[str, Any] | None, env_args: str = "", **top: Any) -> CNIError:
    config = conf(ipam, **top) if ipam is not None else {"cniVersion": "1.0.0", "name": "n"}
    with pytest.raises(CNIError) as info:
        load(config, env_args)
    assert info.value.code == 7
    return info.value


def test_defaults_v4() -> None:
    cfg = load_ok({"ranges": [[{"subnet": "10.1.2.0/24"}]]})
    (r,) = cfg.range_sets[0]
    assert (str(r.range_start), str(r.range_end), str(r.gateway)) == (
        "10.1.2.1",
        "10.1.2.254",
        "10.1.2.1",
    )
    assert cfg.data_dir == DEFAULT_DATA_DIR
    assert cfg.name == "net"
    assert str(cfg.range_sets[0]) == "10.1.2.1-10.1.2.254"


def test_defaults_v6_all_ones_included() -> None:
    cfg = load_ok({"ranges": [[{"subnet": "fd00::/120"}]]})
    (r,) = cfg.range_sets[0]
    assert (str(r.range_start), str(r.range_end), str(r.gateway)) == (
        "fd00::1",
        "fd00::ff",
        "fd00::1",
    )


def test_explicit_values_and_custom_gateway() -> None:
    cfg = load_ok(
        {
            "dataDir": "/x",
            "ranges": [
                [
                    {
                        "subnet": "10.1.2.0/24",
                        "rangeStart": "10.1.2.10",
                        "rangeEnd": "10.1.2.20",
                        "gateway": "10.1.2.254",
                    }
                ]
            ],
        }
    )
    (r,) = cfg.range_sets[0]
    assert (str(r.range_start), str(r.range_end), str(r.gateway)) == (
        "10.1.2.10",
        "10.1.2.20",
        "10.1.2.254",
    )
    assert cfg.data_dir == "/x"


def test_case_insensitive_keys() -> None:
    cfg = load(
        {"name": "n", "cniVersion": "1.0.0", "IPAM": {"Ranges": [[{"SUBNET": "10.0.0.0/24"}]]}}, ""
    )
    assert str(cfg.range_sets[0][0].network) == "10.0.0.0/24"


def test_legacy_subnet_prepended_and_ip_ranges_prepended_before_it() -> None:
    cfg = load_ok(
        {
            "subnet": "10.7.0.0/24",
            "rangeStart": "10.7.0.100",
            "ranges": [[{"subnet": "10.1.0.0/24"}]],
        },
        runtimeConfig={"ipRanges": [[{"subnet": "10.8.0.0/24"}]]},
    )
    nets = [str(s[0].network) for s in cfg.range_sets]
    assert nets == ["10.8.0.0/24", "10.7.0.0/24", "10.1.0.0/24"]
    assert str(cfg.range_sets[1][0].range_start) == "10.7.0.100"


def test_dual_stack_and_several_ranges_per_set() -> None:
    cfg = load_ok(
        {
            "ranges": [
                [{"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"}],
                [{"subnet": "fd00::/64"}],
            ]
        }
    )
    assert [s.family for s in cfg.range_sets] == [4, 6]
    assert str(cfg.range_sets[0]) == "10.0.0.1-10.0.0.2,10.0.1.1-10.0.1.2"


def test_routes_kept() -> None:
    cfg = load_ok(
        {
            "ranges": [[{"subnet": "10.0.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "fd00::/8", "gw": "fd00::1", "priority": 5}],
        }
    )
    assert [str(r.dst) for r in cfg.routes] == ["0.0.0.0/0", "fd00::/8"]
    assert cfg.routes[0].gw is None and str(cfg.routes[1].gw) == "fd00::1"
    assert cfg.routes[1].priority == 5


@pytest.mark.parametrize(
    ("ipam", "message"),
    [
        ({"ranges": [[{"subnet": "foo"}]]}, "invalid CIDR address: foo"),
        ({"ranges": [[{"subnet": "10.0.0.0/33"}]]}, "invalid CIDR address: 10.0.0.0/33"),
        ({"subnet": ""}, "invalid CIDR address: "),
        (
            {"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "foo"}]]},
            "invalid IP address: foo",
        ),
        (
            {"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.300"}]]},
            "invalid IP address: 10.0.0.300",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.1/29"}]]},
            "invalid range set 0: Network has host bits set. For a subnet mask of length 29 "
            "the network address is 10.1.0.0",
        ),
        (
            {"subnet": "fd00::1/64"},
            "invalid range set 0: Network has host bits set. For a subnet mask of length 64 "
            "the network address is fd00::",
        ),
        (
            {"ranges": [[{"subnet": "10.0.0.0/31"}]]},
            "invalid range set 0: Network 10.0.0.0/31 too small to allocate from",
        ),
        (
            {"ranges": [[{"subnet": "10.0.0.0/32"}]]},
            "invalid range set 0: Network 10.0.0.0/32 too small to allocate from",
        ),
        (
            {"ranges": [[{"subnet": "fd00::/127"}]]},
            "invalid range set 0: Network fd00::/127 too small to allocate from",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.2.0.5"}]]},
            "invalid range set 0: RangeStart 10.2.0.5 not in network 10.1.0.0/24",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.0/24", "rangeEnd": "10.2.0.5"}]]},
            "invalid range set 0: RangeEnd 10.2.0.5 not in network 10.1.0.0/24",
        ),
        (
            {
                "ranges": [
                    [{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.50", "rangeEnd": "10.1.0.5"}]
                ]
            },
            "invalid range set 0: RangeStart 10.1.0.50 not in network 10.1.0.0/24",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "fd00::1"}]]},
            "invalid range set 0: RangeStart fd00::1 not in network 10.1.0.0/24",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/25"}]]},
            "invalid range set 0: subnets 10.1.0.1-10.1.0.254 and 10.1.0.1-10.1.0.126 overlap",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/25"}]]},
            "range set 0 overlaps with 1",
        ),
        (
            {
                "ranges": [
                    [{"subnet": "10.2.0.0/24"}],
                    [{"subnet": "10.3.0.0/24"}],
                    [{"subnet": "10.3.0.128/25"}],
                ]
            },
            "range set 1 overlaps with 2",
        ),
        (
            {"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]},
            "invalid range set 0: mixed address families",
        ),
        ({"ranges": [[]]}, "invalid range set 0: empty range set"),
        ({"ranges": []}, "no IP ranges specified"),
        ({}, "no IP ranges specified"),
        (None, "IPAM config missing 'ipam' key"),
        (
            {"ranges": [[{"rangeStart": "10.0.0.1"}]]},
            "invalid config: ipam.ranges[0][0].subnet is required",
        ),
        (
            {"ranges": "10.0.0.0/24"},
            "invalid config: ipam.ranges must be a list of range sets (lists of range objects), "
            'got "10.0.0.0/24"',
        ),
        (
            {"ranges": [[{"subnet": 5}]]},
            "invalid config: ipam.ranges[0][0].subnet must be a string, got 5",
        ),
    ],
)
def test_validation_errors(ipam: dict[str, Any] | None, message: str) -> None:
    assert load_err(ipam).msg == message


def test_error_index_counts_prepended_sets() -> None:
    err = load_err(
        {"ranges": [[{"subnet": "10.1.0.0/31"}]]},
        runtimeConfig={"ipRanges": [[{"subnet": "10.9.0.0/24"}]]},
    )
    assert err.msg == "invalid range set 1: Network 10.1.0.0/31 too small to allocate from"


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", ""])
def test_old_versions_allow_one_set_per_family(version: str) -> None:
    two_v4 = {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.3.0.0/24"}]]}
    with pytest.raises(CNIError) as info:
        load({**conf(two_v4), "cniVersion": version}, "")
    assert (
        info.value.msg == f"CNI version {version} does not support more than 1 address per family"
    )
    dual = {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/64"}]]}
    assert len(load({**conf(dual), "cniVersion": version}, "").range_sets) == 2
    assert len(load({**conf(two_v4), "cniVersion": "0.3.0"}, "").range_sets) == 2


def test_requested_ips_accumulate_in_order() -> None:
    cfg = load_ok(
        {"ranges": [[{"subnet": "10.1.0.0/24"}]]},
        "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.1.0.9/24",
        args={"cni": {"ips": ["10.1.0.7", "10.1.0.9"]}},
        runtimeConfig={"ips": ["fd00:0:0::0005/64", "10.1.0.8"]},
    )
    assert [str(a) for a in cfg.requested] == ["10.1.0.9", "10.1.0.7", "fd00::5", "10.1.0.8"]


@pytest.mark.parametrize(
    ("args", "top", "message"),
    [
        ("IP=foo", {}, 'ARGS: error parsing value of pair "IP=foo": invalid IP address foo'),
        ("", {"args": {"cni": {"ips": ["foo"]}}}, "invalid IP address foo"),
        ("", {"runtimeConfig": {"ips": ["1.2.3"]}}, "invalid IP address 1.2.3"),
        (
            "",
            {"runtimeConfig": {"ips": [7]}},
            "invalid config: runtimeConfig.ips[0] must be a string, got 7",
        ),
    ],
)
def test_requested_ip_errors(args: str, top: dict[str, Any], message: str) -> None:
    assert load_err({"ranges": [[{"subnet": "10.1.0.0/24"}]]}, args, **top).msg == message


def test_unknown_cni_args_rejected_without_ignore_unknown() -> None:
    err = load_err({"ranges": [[{"subnet": "10.1.0.0/24"}]]}, "FOO=1")
    assert "FOO" in err.msg


# -- ipmath ---------------------------------------------------------------------------------


def test_ipmath_next_prev_and_parse() -> None:
    assert str(ipmath.next_ip(ip_address("10.0.0.255"))) == "10.0.1.0"
    assert str(ipmath.prev_ip(ip_address("10.0.1.0"))) == "10.0.0.255"
    assert str(ipmath.next_ip(ip_address("255.255.255.255"))) == "0.0.0.0"
    assert str(ipmath.next_ip(ip_address("fd00::ffff"))) == "fd00::1:0"
    assert str(ipmath.parse_ip("::ffff:10.1.2.3")) == "10.1.2.3"
    assert str(ipmath.parse_ip_or_cidr("10.1.2.3/8")) == "10.1.2.3"
    assert ipmath.parse_cidr("10.1.2.3/8")[:2] == (ip_address("10.1.2.3"), 8)
    assert ipmath.span(ip_address("10.0.0.1"), ip_address("10.0.0.6")) == 6
    for bad in ("", "fe80::1%eth0", "10.0.0.01", "1.2.3", "x"):
        with pytest.raises(ValueError):
            ipmath.parse_ip(bad)
    with pytest.raises(ValueError):
        ipmath.parse_cidr("10.0.0.0")


# -- resolv.conf -----------------------------------------------------------------------------


def test_resolvconf_parsing() -> None:
    text = (
        "# comment\nnameserver 1.1.1.1\n  nameserver   8.8.8.8 extra\n; other comment\n"
        "domain a.example\nsearch x y\nsearch z\noptions ndots:5 rotate\nnameserver\n"
        "unknown thing\ndomain b.example\r\n"
    )
    dns = resolvconf.parse_text(text)
    assert dns.nameservers == ["1.1.1.1", "8.8.8.8"]
    assert dns.domain == "b.example"
    assert dns.search == ["x", "y", "z"]
    assert dns.options == ["ndots:5", "rotate"]
    assert resolvconf.parse_text("").is_empty()


def test_load_cached_is_load_with_the_requests_read_per_call() -> None:
    """The daemon parses a network's config once; CNI_ARGS (per pod) are read every call,
    and what a call gets is its own (the routes go into its Result)."""
    from pycni.plugins.ipam.host_local.config import load_cached

    ipam = {"subnet": "10.9.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}
    config = conf(ipam, prevResult={"cniVersion": "1.0.0", "ips": []})
    first = load_cached(config, "IP=10.9.0.5")
    second = load_cached(conf(ipam), "IP=10.9.0.6")  # prevResult never matters
    assert first == load(config, "IP=10.9.0.5")
    assert second == load(conf(ipam), "IP=10.9.0.6")
    assert second.range_sets is first.range_sets  # parsed once
    assert second.routes == first.routes and second.routes[0] is not first.routes[0]
    with pytest.raises(CNIError) as cached_err:
        load_cached(config, "IP=10.9.0.x")
    assert str(cached_err.value) == str(load_err(ipam, "IP=10.9.0.x"))
    other = load_cached(conf(ipam, name="other"), "")
    assert other.name == "other" and other.requested == []
    assert load_cached(conf({**ipam, "dataDir": "/d"}), "").data_dir == "/d"
