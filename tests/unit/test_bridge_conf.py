"""bridge's pure parts: config loading (defaults, MAC precedence, the VLAN trunk) and the
reference's calcGateways, without a kernel."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from pycni.plugins.main.bridge.plugin import DEFAULT_BRIDGE, IF_CONTAINER, calc_gateways, load_conf
from pycni.skel.base import Request
from pycni.spec.errors import CNIError
from pycni.spec.result import IPConfig, Result, Route


def _request(config: dict[str, Any], args: str = "") -> Request:
    base = {"cniVersion": "1.0.0", "name": "net1", "type": "bridge"}
    return Request("ADD", "c1", "/run/netns/x", "eth0", args, [], {**base, **config}, b"", {})


def _error(config: dict[str, Any]) -> CNIError:
    with pytest.raises(CNIError) as info:
        load_conf(_request(config))
    return info.value


def test_defaults() -> None:
    conf = load_conf(_request({}))
    assert (conf.name, conf.bridge, conf.mtu, conf.vlan, conf.vlans) == (
        "net1",
        DEFAULT_BRIDGE,
        0,
        0,
        [],
    )
    assert not conf.is_gateway and not conf.ip_masq and not conf.layer3
    assert not conf.vlan_filtering


def test_default_gateway_implies_gateway_and_keys_match_any_case() -> None:
    conf = load_conf(_request({"ISDEFAULTGATEWAY": True, "Bridge": "br9", "ipam": {"type": "x"}}))
    assert conf.is_default_gateway and conf.is_gateway
    assert conf.bridge == "br9" and conf.layer3 and conf.ipam_type == "x"


def test_mac_precedence_cni_args_then_args_cni_then_runtime_config() -> None:
    only_env = load_conf(_request({}, args="MAC=02-00-00-00-00-0A"))
    assert only_env.mac == "02:00:00:00:00:0a"
    conf = load_conf(
        _request(
            {
                "args": {"cni": {"mac": "02:00:00:00:00:0b"}},
                "runtimeConfig": {"mac": "02:00:00:00:00:0c"},
            },
            args="MAC=02:00:00:00:00:0a",
        )
    )
    assert conf.mac == "02:00:00:00:00:0c"
    assert _error({"runtimeConfig": {"mac": "02:00:00:00:00"}}).code == 7


def test_vlan_trunk_ranges_and_ids_are_merged_sorted_and_deduplicated() -> None:
    conf = load_conf(
        _request({"vlanTrunk": [{"id": 9}, {"minID": 3, "maxID": 5}, {"id": 4}, {"id": 1}]})
    )
    assert conf.vlans == [1, 3, 4, 5, 9]
    assert conf.vlan_filtering


@pytest.mark.parametrize(
    ("trunk", "message"),
    [
        ([{"minID": 0, "maxID": 3}], "incorrect trunk minID parameter"),
        ([{"minID": 3, "maxID": 4095}], "incorrect trunk maxID parameter"),
        ([{"minID": 5, "maxID": 3}], "minID is greater than maxID in trunk parameter"),
        ([{"maxID": 3}], "minID is missing"),
        ([{"minID": 3}], "maxID is missing"),
        ([{"id": 4095}], "incorrect trunk id parameter"),
    ],
)
def test_vlan_trunk_errors_are_the_references(trunk: list[Any], message: str) -> None:
    err = _error({"vlanTrunk": trunk})
    assert err.code == 7 and message in err.msg


def test_vlan_and_trunk_together_and_out_of_range_values() -> None:
    # allowed since the reference 1.8 (``vlan`` is then the trunk's native VLAN)
    conf = load_conf(_request({"vlan": 5, "vlanTrunk": [{"id": 6}]}))
    assert (conf.vlan, conf.vlans, conf.vlan_filtering) == (5, [6], True)
    assert _error({"vlan": 5000}).code == 7
    assert _error({"mtu": 1 << 33}).code == 7
    assert _error({"mtu": 67}).code == 7
    assert _error({"bridge": "x" * 16}).code == 7
    assert _error({"ipMasqBackend": "pf"}).code == 7


def _result(*cidrs: str, gateway: str | None = None, routes: list[Route] | None = None) -> Result:
    ips = [
        IPConfig(
            address=ipaddress.ip_interface(c),
            gateway=ipaddress.ip_address(gateway) if gateway else None,
        )
        for c in cidrs
    ]
    return Result(ips=ips, routes=list(routes or []))


def test_calc_gateways_gateway_is_network_plus_one_with_the_pod_prefix() -> None:
    conf = load_conf(_request({"isGateway": True}))
    result = _result("10.1.2.7/24", "fd00:1::7/64")
    gws = calc_gateways(result, conf)
    assert gws == {
        4: [ipaddress.ip_interface("10.1.2.1/24")],
        6: [ipaddress.ip_interface("fd00:1::1/64")],
    }
    assert [ip.interface for ip in result.ips] == [IF_CONTAINER, IF_CONTAINER]
    assert [str(ip.gateway) for ip in result.ips] == ["10.1.2.1", "fd00:1::1"]
    assert result.routes == []  # not the default gateway: no route added


def test_calc_gateways_keeps_an_ipam_gateway_and_adds_one_default_route_per_family() -> None:
    conf = load_conf(_request({"isDefaultGateway": True}))
    result = _result("10.1.2.7/24", "10.1.3.7/24", gateway="10.1.2.254")
    gws = calc_gateways(result, conf)
    assert gws[4] == [ipaddress.ip_interface("10.1.2.254/24")] * 2
    default = ipaddress.ip_network("0.0.0.0/0")
    assert [(r.dst, str(r.gw)) for r in result.routes] == [(default, "10.1.2.254")]


def test_calc_gateways_leaves_a_default_route_from_ipam_alone() -> None:
    conf = load_conf(_request({"isDefaultGateway": True}))
    ipam_default = Route(dst=ipaddress.ip_network("0.0.0.0/0"), gw=ipaddress.ip_address("10.9.9.9"))
    result = _result("10.1.2.7/24", routes=[ipam_default])
    calc_gateways(result, conf)
    assert result.routes == [ipam_default]


def test_calc_gateways_without_gateway_mode_changes_only_the_interface_index() -> None:
    conf = load_conf(_request({}))
    result = _result("10.1.2.7/24")
    assert calc_gateways(result, conf) == {4: [], 6: []}
    assert result.ips[0].gateway is None and result.ips[0].interface == IF_CONTAINER
