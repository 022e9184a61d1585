"""CNI results: decoding every version, libcni's conversion rules and Go's output format."""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, IPv6Interface, IPv6Network
from typing import Any

import pytest

from pycni.spec.errors import DECODING_FAILURE, INCOMPATIBLE_CNI_VERSION, UNKNOWN, CNIError
from pycni.spec.result import (
    DNS,
    Interface,
    IPConfig,
    Result,
    Route,
    convert,
    go_json,
)
from pycni.spec.version import ALL, LEGACY

# ---------------------------------------------------------------------------------------------
# The rich result in every shape it takes. The v6 address is listed first so that the lossy
# 0.2.0 conversion must pick IPs by version, and one route carries every 1.1 field.

DNS_DICT = {
    "nameservers": ["10.1.0.1", "fd00::1"],
    "domain": "cluster.local",
    "search": ["svc.cluster.local"],
    "options": ["ndots:5"],
}
RICH_ROUTE = {
    "dst": "192.168.0.0/16",
    "gw": "10.1.0.254",
    "mtu": 1300,
    "advmss": 1260,
    "priority": 10,
    "table": 100,
    "scope": 0,
}


def modern_full(version: str) -> dict[str, Any]:
    """What a 1.x result holds (and what 1.x -> 1.x prints)."""
    return {
        "cniVersion": version,
        "interfaces": [
            {"name": "cni0", "mac": "0a:58:0a:01:00:01"},
            {
                "name": "eth0",
                "mac": "0a:58:0a:01:00:05",
                "mtu": 1400,
                "sandbox": "/var/run/netns/blue",
                "socketPath": "/run/vhost/eth0.sock",
                "pciID": "0000:00:1f.6",
            },
        ],
        "ips": [
            {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 1},
            {"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 1},
            {"address": "10.2.0.5/24", "interface": 0},
            {"address": "fd01::5/64"},
        ],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}, RICH_ROUTE],
        "dns": DNS_DICT,
    }


def list_full(version: str) -> dict[str, Any]:
    """1.x -> 0.3.x/0.4.0: version added, 1.1 interface fields gone, 1.1 route fields kept."""
    return {
        "cniVersion": version,
        "interfaces": [
            {"name": "cni0", "mac": "0a:58:0a:01:00:01"},
            {"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/var/run/netns/blue"},
        ],
        "ips": [
            {"version": "6", "interface": 1, "address": "fd00::5/64", "gateway": "fd00::1"},
            {"version": "4", "interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"version": "4", "interface": 0, "address": "10.2.0.5/24"},
            {"version": "6", "address": "fd01::5/64"},
        ],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}, RICH_ROUTE],
        "dns": DNS_DICT,
    }


def modern_from_list(version: str) -> dict[str, Any]:
    """0.3.x/0.4.0 -> 1.x: the interfaces never had the 1.1 fields."""
    out = modern_full(version)
    out["interfaces"][1] = {
        "name": "eth0",
        "mac": "0a:58:0a:01:00:05",
        "sandbox": "/var/run/netns/blue",
    }
    return out


def legacy(version: str) -> dict[str, Any]:
    """Anything -> 0.1.0/0.2.0: first v4 and first v6, routes by dst family with dst+gw only."""
    return {
        "cniVersion": version,
        "ip4": {
            "ip": "10.1.0.5/16",
            "gateway": "10.1.0.1",
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}],
        },
        "ip6": {
            "ip": "fd00::5/64",
            "gateway": "fd00::1",
            "routes": [{"dst": "::/0", "gw": "fd00::1"}],
        },
        "dns": DNS_DICT,
    }


LEGACY_ROUTES = [
    {"dst": "0.0.0.0/0"},
    {"dst": "192.168.0.0/16", "gw": "10.1.0.254"},
    {"dst": "::/0", "gw": "fd00::1"},
]


def list_from_legacy(version: str) -> dict[str, Any]:
    """0.1.0/0.2.0 -> 0.3.x/0.4.0: ip4 then ip6, routes flattened, no interfaces."""
    return {
        "cniVersion": version,
        "ips": [
            {"version": "4", "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"version": "6", "address": "fd00::5/64", "gateway": "fd00::1"},
        ],
        "routes": LEGACY_ROUTES,
        "dns": DNS_DICT,
    }


def modern_from_legacy(version: str) -> dict[str, Any]:
    return {
        "cniVersion": version,
        "ips": [
            {"address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"address": "fd00::5/64", "gateway": "fd00::1"},
        ],
        "routes": LEGACY_ROUTES,
        "dns": DNS_DICT,
    }


def family(version: str) -> str:
    if version in LEGACY:
        return "legacy"
    return "modern" if version.startswith("1.") else "list"


SOURCE = {"modern": modern_full, "list": list_full, "legacy": legacy}
EXPECTED = {
    ("modern", "modern"): modern_full,
    ("modern", "list"): list_full,
    ("modern", "legacy"): legacy,
    ("list", "modern"): modern_from_list,
    ("list", "list"): list_full,
    ("list", "legacy"): legacy,
    ("legacy", "modern"): modern_from_legacy,
    ("legacy", "list"): list_from_legacy,
    ("legacy", "legacy"): legacy,
}
PAIRS = [(source, target) for source in ALL for target in ALL]


@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_rich_result_converts_between_all_versions(source: str, target: str) -> None:
    data = SOURCE[family(source)](source)
    expected = EXPECTED[(family(source), family(target))](target)
    assert Result.from_dict(data).to_dict(target) == expected
    assert convert(data, target) == expected
    assert json.loads(Result.from_dict(data).to_json(target)) == expected


@pytest.mark.parametrize("version", ALL)
def test_reading_then_writing_the_same_version_is_identity(version: str) -> None:
    data = SOURCE[family(version)](version)
    assert Result.from_dict(data).to_dict() == data


def test_decoded_model_has_typed_fields() -> None:
    result = Result.from_dict(modern_full("1.1.0"))
    assert result.cni_version == "1.1.0"
    assert result.interfaces[1] == Interface(
        "eth0",
        mac="0a:58:0a:01:00:05",
        mtu=1400,
        sandbox="/var/run/netns/blue",
        socket_path="/run/vhost/eth0.sock",
        pci_id="0000:00:1f.6",
    )
    assert result.ips[1] == IPConfig(
        IPv4Interface("10.1.0.5/16"), IPv4Address("10.1.0.1"), interface=1
    )
    assert result.ips[0].version == "6" and result.ips[1].version == "4"
    assert result.routes[2] == Route(
        IPv4Network("192.168.0.0/16"),
        IPv4Address("10.1.0.254"),
        mtu=1300,
        advmss=1260,
        priority=10,
        table=100,
        scope=0,
    )
    assert result.dns == DNS(
        ["10.1.0.1", "fd00::1"], "cluster.local", ["svc.cluster.local"], ["ndots:5"]
    )


# ---------------------------------------------------------------------------------------------
# Specific rules


def test_empty_dns_rule_per_version() -> None:
    result = Result(ips=[IPConfig(IPv4Interface("10.0.0.2/24"))])
    assert "dns" not in result.to_dict("1.1.0")
    assert "dns" not in result.to_dict("1.0.0")
    for version in ("0.3.0", "0.3.1", "0.4.0", "0.1.0", "0.2.0"):
        assert result.to_dict(version)["dns"] == {}
    result.dns.domain = "example.org"
    assert result.to_dict("1.1.0")["dns"] == {"domain": "example.org"}


def test_0_3_0_reads_the_spec_typo_ip_key() -> None:
    data = {
        "cniVersion": "0.3.0",
        "interfaces": [{"name": "eth0"}],
        "ip": [{"version": "4", "interface": 0, "address": "10.0.0.2/24"}],
    }
    result = Result.from_dict(data)
    assert result.ips == [IPConfig(IPv4Interface("10.0.0.2/24"), interface=0)]
    # Go's types040 always writes "ips", also for 0.3.0.
    assert result.to_dict("0.3.0") == {
        "cniVersion": "0.3.0",
        "interfaces": [{"name": "eth0"}],
        "ips": [{"version": "4", "interface": 0, "address": "10.0.0.2/24"}],
        "dns": {},
    }


def test_ips_key_wins_over_the_typo_key() -> None:
    data = {
        "cniVersion": "0.3.0",
        "ip": [{"address": "10.0.0.9/24"}],
        "ips": [{"address": "10.0.0.2/24"}],
    }
    assert [str(ip.address) for ip in Result.from_dict(data).ips] == ["10.0.0.2/24"]


def test_1_1_route_fields_survive_in_0_4_0_output() -> None:
    result = Result(
        ips=[IPConfig(IPv4Interface("10.0.0.2/24"))],
        routes=[
            Route(
                IPv4Network("10.10.0.0/16"), mtu=1450, advmss=1400, priority=5, table=7, scope=253
            )
        ],
    )
    assert result.to_dict("0.4.0")["routes"] == [
        {
            "dst": "10.10.0.0/16",
            "mtu": 1450,
            "advmss": 1400,
            "priority": 5,
            "table": 7,
            "scope": 253,
        }
    ]
    assert result.to_dict("0.2.0")["ip4"]["routes"] == [{"dst": "10.10.0.0/16"}]


def test_1_0_0_keeps_1_1_interface_fields() -> None:
    result = Result(interfaces=[Interface("eth0", mtu=9000, socket_path="/s", pci_id="0:1")])
    assert result.to_dict("1.0.0")["interfaces"] == [
        {"name": "eth0", "mtu": 9000, "socketPath": "/s", "pciID": "0:1"}
    ]
    assert result.to_dict("0.4.0")["interfaces"] == [{"name": "eth0"}]


def test_cached_1_0_0_result_converted_to_list_versions() -> None:
    cached = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/proc/1/ns/net"}],
        "ips": [{"address": "10.88.0.7/16", "gateway": "10.88.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.88.0.1"}],
    }
    for version in ("0.4.0", "0.3.1"):
        assert convert(cached, version) == {
            "cniVersion": version,
            "interfaces": [
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/proc/1/ns/net"}
            ],
            "ips": [
                {"version": "4", "interface": 0, "address": "10.88.0.7/16", "gateway": "10.88.0.1"}
            ],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.88.0.1"}],
            "dns": {},
        }


def test_lossy_legacy_conversion_drops_routes_without_an_ip_of_their_family() -> None:
    data = {
        "cniVersion": "0.4.0",
        "ips": [
            {"version": "4", "address": "10.0.0.2/24"},
            {"version": "4", "address": "10.0.1.2/24", "gateway": "10.0.1.1"},
        ],
        "routes": [{"dst": "fd00::/8", "gw": "fd00::1"}, {"dst": "10.9.0.0/16", "mtu": 1200}],
    }
    assert convert(data, "0.2.0") == {
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "10.9.0.0/16"}]},
        "dns": {},
    }


@pytest.mark.parametrize("source", ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
@pytest.mark.parametrize("target", ["0.1.0", "0.2.0"])
def test_legacy_conversion_without_ips_fails(source: str, target: str) -> None:
    data = {"cniVersion": source, "interfaces": [{"name": "eth0"}], "routes": [{"dst": "::/0"}]}
    with pytest.raises(CNIError) as info:
        convert(data, target)
    assert info.value.code == UNKNOWN
    assert info.value.msg == "cannot convert: no valid IP addresses"


def test_legacy_without_ips_stays_legacy() -> None:
    assert convert({"cniVersion": "0.2.0"}, "0.1.0") == {"cniVersion": "0.1.0", "dns": {}}
    assert convert({"cniVersion": "0.2.0"}, "0.4.0") == {"cniVersion": "0.4.0", "dns": {}}


def test_legacy_to_legacy_keeps_full_routes() -> None:
    data = {
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "10.1.0.0/16", "mtu": 1400}]},
    }
    assert convert(data, "0.1.0")["ip4"]["routes"] == [{"dst": "10.1.0.0/16", "mtu": 1400}]
    assert convert(data, "0.4.0")["routes"] == [{"dst": "10.1.0.0/16", "mtu": 1400}]


def test_convert_equal_versions_returns_the_input_unchanged() -> None:
    data = {"cniVersion": "0.4.0", "ips": [{"address": "10.0.0.2/24", "vendor": 1}], "x": True}
    out = convert(data, "0.4.0")
    assert out == data
    assert out is not data


def test_convert_empty_target_means_0_1_0() -> None:
    data = {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}
    assert convert(data, "") == {"cniVersion": "0.1.0", "ip4": {"ip": "10.0.0.2/24"}, "dns": {}}
    assert Result.from_dict(data).to_dict("")["cniVersion"] == "0.1.0"


@pytest.mark.parametrize("target", ["1.1", "2.0.0", "0.5.0", "latest"])
def test_convert_to_unknown_version(target: str) -> None:
    with pytest.raises(CNIError) as info:
        convert({"cniVersion": "1.0.0"}, target)
    assert info.value.code == UNKNOWN
    assert info.value.msg == f"no converter for CNI result version 1.0.0 to {target}"


def test_result_with_unknown_own_version_cannot_be_written() -> None:
    with pytest.raises(CNIError) as info:
        Result(cni_version="9.9.9").to_dict("1.1.0")
    assert info.value.msg == "no converter for CNI result version 9.9.9 to 1.1.0"


def test_result_with_empty_own_version_is_current() -> None:
    assert Result(cni_version="").to_dict() == {"cniVersion": "1.1.0"}


def test_to_dict_defaults_to_own_version() -> None:
    assert Result(cni_version="0.3.1").to_dict() == {"cniVersion": "0.3.1", "dns": {}}


def test_as_version_matches_decoding_the_output() -> None:
    result = Result.from_dict(modern_full("1.1.0"))
    for version in ALL:
        assert Result.from_dict(result.to_dict(version)) == result.as_version(version)


# ---------------------------------------------------------------------------------------------
# Decoding details


def test_missing_version_defaults() -> None:
    data = {"ip4": {"ip": "10.0.0.2/24"}}
    assert Result.from_dict(data).cni_version == "0.1.0"
    assert Result.from_dict({"cniVersion": "", **data}).cni_version == "0.1.0"
    modern = {"ips": [{"address": "10.0.0.2/24"}]}
    result = Result.from_dict(modern, default_version="1.0.0")
    assert result.cni_version == "1.0.0"
    assert result.ips == [IPConfig(IPv4Interface("10.0.0.2/24"))]
    # An explicit version beats the default.
    assert Result.from_dict({"cniVersion": "0.4.0"}, default_version="1.0.0").cni_version == "0.4.0"


@pytest.mark.parametrize("version", ["1.2.0", "1.1", "0.5.0", "x"])
def test_unsupported_version(version: str) -> None:
    with pytest.raises(CNIError) as info:
        Result.from_dict({"cniVersion": version})
    assert info.value.msg == f'unsupported CNI result version "{version}"'
    assert info.value.code == INCOMPATIBLE_CNI_VERSION
    with pytest.raises(CNIError, match="unsupported CNI result version"):
        convert({"cniVersion": version}, "1.1.0")


def test_keys_match_case_insensitively() -> None:
    data = {
        "CNIVersion": "1.1.0",
        "Interfaces": [{"NAME": "eth0", "Mac": "aa:aa:aa:aa:aa:aa", "MTU": 1500, "PciId": "x"}],
        "IPs": [{"Address": "10.0.0.2/24", "GateWay": "10.0.0.1", "Interface": 0}],
        "Routes": [{"Dst": "0.0.0.0/0", "GW": "10.0.0.1", "AdvMSS": 1400}],
        "DNS": {"NameServers": ["10.0.0.1"]},
    }
    assert Result.from_dict(data).to_dict() == {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth0", "mac": "aa:aa:aa:aa:aa:aa", "mtu": 1500, "pciID": "x"}],
        "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "advmss": 1400}],
        "dns": {"nameservers": ["10.0.0.1"]},
    }
    legacy_data = {
        "cniversion": "0.2.0",
        "IP4": {"IP": "10.0.0.2/24", "Routes": [{"DST": "1.0.0.0/8"}]},
    }
    assert convert(legacy_data, "0.4.0")["routes"] == [{"dst": "1.0.0.0/8"}]


def test_last_matching_key_wins_like_go() -> None:
    data = {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.1/8", "ADDRESS": "10.0.0.2/8"}]}
    assert str(Result.from_dict(data).ips[0].address) == "10.0.0.2/8"


def test_unknown_keys_and_nulls_are_ignored() -> None:
    data = {
        "cniVersion": "1.0.0",
        "vendor": {"x": 1},
        "interfaces": None,
        "ips": [{"address": "10.0.0.2/24", "gateway": None, "interface": None, "extra": 1}],
        "routes": [{"dst": "10.1.0.0/16", "gw": "", "table": None}],
        "dns": None,
    }
    assert Result.from_dict(data).to_dict() == {
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.0.0.2/24"}],
        "routes": [{"dst": "10.1.0.0/16"}],
    }


def test_address_keeps_host_bits_and_route_dst_is_masked() -> None:
    data = {
        "cniVersion": "1.1.0",
        "ips": [{"address": "10.1.2.3/16"}, {"address": "fd00::abcd/64"}],
        "routes": [{"dst": "10.9.8.7/16"}, {"dst": "fd00:1::5/48"}],
    }
    result = Result.from_dict(data)
    assert result.ips[0].address == IPv4Interface("10.1.2.3/16")
    assert result.ips[1].address == IPv6Interface("fd00::abcd/64")
    assert result.routes == [Route(IPv4Network("10.9.0.0/16")), Route(IPv6Network("fd00:1::/48"))]
    assert result.to_dict()["ips"] == [{"address": "10.1.2.3/16"}, {"address": "fd00::abcd/64"}]


def test_ipv4_mapped_addresses_become_ipv4_like_go() -> None:
    data = {
        "cniVersion": "1.1.0",
        "ips": [{"address": "::ffff:10.0.0.2/120", "gateway": "::ffff:10.0.0.1"}],
        "routes": [{"dst": "::ffff:10.1.0.0/112"}],
    }
    result = Result.from_dict(data)
    assert result.ips[0] == IPConfig(IPv4Interface("10.0.0.2/24"), IPv4Address("10.0.0.1"))
    assert result.routes[0].dst == IPv4Network("10.1.0.0/16")
    mapped = Result(ips=[IPConfig(IPv6Interface("::ffff:10.0.0.2/120"))])
    assert mapped.to_dict("0.4.0")["ips"] == [{"version": "4", "address": "10.0.0.2/24"}]


def test_ipv6_text_is_canonical() -> None:
    data = {"cniVersion": "1.1.0", "ips": [{"address": "FD00:0:0:0:0:0:0:5/64"}]}
    assert Result.from_dict(data).to_dict()["ips"] == [{"address": "fd00::5/64"}]


BAD_DATA = [
    ([], "failed to decode CNI result: expected a JSON object, got an array"),
    ({"cniVersion": 1}, "cniVersion: expected a string, got a number (1)"),
    ({"cniVersion": "1.1.0", "ips": {}}, "ips: expected an array, got an object"),
    ({"cniVersion": "1.1.0", "ips": [None]}, "ips[0]: expected an object, got null"),
    ({"cniVersion": "1.1.0", "ips": [{}]}, "ips[0].address: missing"),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2"}]},
        'ips[0].address: invalid CIDR address "10.0.0.2"',
    ),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/33"}]},
        'ips[0].address: invalid CIDR address "10.0.0.2/33"',
    ),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/255.255.255.0"}]},
        'invalid CIDR address "10.0.0.2/255.255.255.0"',
    ),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "fe80::1%eth0/64"}]},
        'invalid CIDR address "fe80::1%eth0/64"',
    ),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.300"}]},
        'ips[0].gateway: invalid IP address "10.0.0.300"',
    ),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24", "interface": -1}]},
        "ips[0].interface: index must not be negative, got -1",
    ),
    (
        {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24", "interface": "0"}]},
        "ips[0].interface: expected an integer, got a string",
    ),
    (
        {"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "mtu": 1.5}]},
        "routes[0].mtu: expected an integer, got a number (1.5)",
    ),
    (
        {"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "table": True}]},
        "routes[0].table: expected an integer, got a boolean",
    ),
    ({"cniVersion": "1.1.0", "routes": [{"gw": "10.0.0.1"}]}, "routes[0].dst: missing"),
    (
        {"cniVersion": "1.1.0", "interfaces": [{"name": 5}]},
        "interfaces[0].name: expected a string, got a number (5)",
    ),
    (
        {"cniVersion": "1.1.0", "dns": {"nameservers": "8.8.8.8"}},
        "dns.nameservers: expected an array of strings, got a string",
    ),
    ({"cniVersion": "1.1.0", "dns": {"search": [1]}}, "dns.search[0]: expected a string"),
    ({"cniVersion": "0.2.0", "ip4": {"ip": "fd00::2/64"}}, "ip4.ip: expected an IPv4 address"),
    ({"cniVersion": "0.2.0", "ip6": {"ip": "10.0.0.2/24"}}, "ip6.ip: expected an IPv6 address"),
    ({"cniVersion": "0.2.0", "ip4": "10.0.0.2/24"}, "ip4: expected an object, got a string"),
    ({"cniVersion": "0.2.0", "ip4": {"gateway": "10.0.0.1"}}, "ip4.ip: missing"),
    (
        {"cniVersion": "0.4.0", "routes": [{"dst": "nope/8"}]},
        'routes[0].dst: invalid CIDR address "nope/8"',
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD_DATA)
def test_bad_data_is_a_decoding_failure(data: Any, message: str) -> None:
    with pytest.raises(CNIError) as info:
        Result.from_dict(data)
    assert info.value.code == DECODING_FAILURE
    assert message in info.value.msg
    assert info.value.msg.startswith("failed to decode CNI result: ")


def test_from_json() -> None:
    assert Result.from_json(b'{"cniVersion":"1.0.0"}').cni_version == "1.0.0"
    with pytest.raises(CNIError) as info:
        Result.from_json("")
    assert info.value.code == DECODING_FAILURE
    with pytest.raises(CNIError) as info:
        Result.from_json("[1")
    assert info.value.code == DECODING_FAILURE


# ---------------------------------------------------------------------------------------------
# Go's Print()

SMALL = Result(
    cni_version="1.1.0",
    interfaces=[Interface("eth0", mac="aa:bb:cc:dd:ee:ff", mtu=1500, sandbox="/run/netns/a")],
    ips=[IPConfig(IPv4Interface("10.0.0.2/24"), IPv4Address("10.0.0.1"), interface=0)],
    routes=[Route(IPv4Network("0.0.0.0/0"), scope=0)],
    dns=DNS(nameservers=["10.0.0.1"]),
)


def test_to_json_1_x_sorts_keys_like_go_map_marshalling() -> None:
    # types100 marshals through map[string]interface{}, so every object's keys come out sorted.
    assert SMALL.to_json() == (
        "{\n"
        '    "cniVersion": "1.1.0",\n'
        '    "dns": {\n'
        '        "nameservers": [\n'
        '            "10.0.0.1"\n'
        "        ]\n"
        "    },\n"
        '    "interfaces": [\n'
        "        {\n"
        '            "mac": "aa:bb:cc:dd:ee:ff",\n'
        '            "mtu": 1500,\n'
        '            "name": "eth0",\n'
        '            "sandbox": "/run/netns/a"\n'
        "        }\n"
        "    ],\n"
        '    "ips": [\n'
        "        {\n"
        '            "address": "10.0.0.2/24",\n'
        '            "gateway": "10.0.0.1",\n'
        '            "interface": 0\n'
        "        }\n"
        "    ],\n"
        '    "routes": [\n'
        "        {\n"
        '            "dst": "0.0.0.0/0",\n'
        '            "scope": 0\n'
        "        }\n"
        "    ]\n"
        "}"
    )


def test_to_json_0_4_0_uses_struct_order() -> None:
    assert SMALL.to_json("0.4.0") == (
        "{\n"
        '    "cniVersion": "0.4.0",\n'
        '    "interfaces": [\n'
        "        {\n"
        '            "name": "eth0",\n'
        '            "mac": "aa:bb:cc:dd:ee:ff",\n'
        '            "sandbox": "/run/netns/a"\n'
        "        }\n"
        "    ],\n"
        '    "ips": [\n'
        "        {\n"
        '            "version": "4",\n'
        '            "interface": 0,\n'
        '            "address": "10.0.0.2/24",\n'
        '            "gateway": "10.0.0.1"\n'
        "        }\n"
        "    ],\n"
        '    "routes": [\n'
        "        {\n"
        '            "dst": "0.0.0.0/0",\n'
        '            "scope": 0\n'
        "        }\n"
        "    ],\n"
        '    "dns": {\n'
        '        "nameservers": [\n'
        '            "10.0.0.1"\n'
        "        ]\n"
        "    }\n"
        "}"
    )


def test_to_json_0_2_0_uses_struct_order() -> None:
    assert SMALL.to_json("0.2.0") == (
        "{\n"
        '    "cniVersion": "0.2.0",\n'
        '    "ip4": {\n'
        '        "ip": "10.0.0.2/24",\n'
        '        "gateway": "10.0.0.1",\n'
        '        "routes": [\n'
        "            {\n"
        '                "dst": "0.0.0.0/0"\n'
        "            }\n"
        "        ]\n"
        "    },\n"
        '    "dns": {\n'
        '        "nameservers": [\n'
        '            "10.0.0.1"\n'
        "        ]\n"
        "    }\n"
        "}"
    )


def test_go_json_escaping() -> None:
    assert go_json({"a": "<&>\u2028é"}) == '{\n    "a": "\\u003c\\u0026\\u003e\\u2028é"\n}'
    assert go_json({}) == "{}"
    assert not SMALL.to_json().endswith("\n")


@pytest.mark.parametrize("stated", [None, "", "6"])
def test_list_ip_version_is_kept_as_read(stated: str | None) -> None:
    """Go's types040 keeps an IP's ``version`` as given (absent: ""), as cnitool prints it; a
    conversion through 1.x recomputes it from the address, and to 0.2.0 only "4"/"6" count."""
    ip: dict[str, Any] = {"address": "10.1.0.2/24"}
    if stated is not None:
        ip["version"] = stated
    data = {"cniVersion": "0.4.0", "ips": [ip]}
    result = Result.from_dict(data)
    want = "" if stated is None else stated
    assert result.to_dict()["ips"] == [{"version": want, "address": "10.1.0.2/24"}]
    assert result.to_dict("0.3.1")["ips"][0]["version"] == want
    again = Result.from_dict(result.to_dict("1.0.0"))
    assert again.to_dict("0.4.0")["ips"][0]["version"] == "4"
    assert result == Result.from_dict({"cniVersion": "0.4.0", "ips": [{"address": "10.1.0.2/24"}]})
    if want == "":
        with pytest.raises(CNIError, match="no valid IP addresses"):
            result.to_dict("0.2.0")
