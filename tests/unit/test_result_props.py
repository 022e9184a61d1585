"""Property tests: generated results survive libcni's conversions as the rules say."""

from __future__ import annotations

import json
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
)
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.record import replace
from pycni.spec.errors import CNIError
from pycni.spec.result import DNS, Interface, IPConfig, Result, Route, convert, go_json

LIST_AND_MODERN = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

text = st.text(st.characters(codec="utf-8"), max_size=12)
go_int = st.integers(min_value=-(2**31), max_value=2**31)

v4_address = st.integers(0, 2**32 - 1).map(IPv4Address)
v6_address = st.integers(0, 2**128 - 1).map(IPv6Address).filter(lambda a: a.ipv4_mapped is None)
v4_interface = st.builds(lambda a, p: IPv4Interface((a, p)), v4_address, st.integers(0, 32))
v6_interface = st.builds(lambda a, p: IPv6Interface((a, p)), v6_address, st.integers(0, 128))
v4_network = st.builds(
    lambda a, p: IPv4Network((a, p), strict=False), v4_address, st.integers(0, 32)
)
v6_network = st.builds(
    lambda a, p: IPv6Network((a, p), strict=False), v6_address, st.integers(0, 128)
)

interfaces = st.builds(
    Interface,
    name=text,
    mac=text,
    mtu=go_int,
    sandbox=text,
    socket_path=text,
    pci_id=text,
)
ip_configs = st.one_of(
    st.builds(IPConfig, v4_interface, st.none() | v4_address, st.none() | st.integers(0, 8)),
    st.builds(IPConfig, v6_interface, st.none() | v6_address, st.none() | st.integers(0, 8)),
)
routes = st.one_of(
    st.builds(
        Route,
        v4_network,
        st.none() | v4_address,
        go_int,
        go_int,
        go_int,
        st.none() | go_int,
        st.none() | st.integers(0, 255),
    ),
    st.builds(
        Route,
        v6_network,
        st.none() | v6_address,
        go_int,
        go_int,
        go_int,
        st.none() | go_int,
        st.none() | st.integers(0, 255),
    ),
)
dns = st.builds(
    DNS,
    nameservers=st.lists(text, max_size=3),
    domain=text,
    search=st.lists(text, max_size=3),
    options=st.lists(text, max_size=3),
)
results = st.builds(
    Result,
    cni_version=st.just("1.1.0"),
    interfaces=st.lists(interfaces, max_size=3),
    ips=st.lists(ip_configs, max_size=5),
    routes=st.lists(routes, max_size=5),
    dns=dns,
)


def without_1_1_interface_fields(result: Result) -> Result:
    return replace(
        result,
        interfaces=[Interface(i.name, mac=i.mac, sandbox=i.sandbox) for i in result.interfaces],
    )


@settings(max_examples=150)
@given(results)
def test_1_1_to_0_4_and_back_keeps_everything_but_1_1_interface_fields(result: Result) -> None:
    back = Result.from_dict(convert(result.to_dict(), "0.4.0")).as_version("1.1.0")
    assert back == without_1_1_interface_fields(result)
    assert convert(convert(result.to_dict(), "0.4.0"), "1.1.0") == back.to_dict()


@settings(max_examples=100)
@given(results, st.sampled_from(LIST_AND_MODERN))
def test_decoding_the_output_gives_the_converted_model(result: Result, version: str) -> None:
    written = result.to_dict(version)
    assert Result.from_dict(written) == result.as_version(version)
    assert json.loads(result.to_json(version)) == written
    expected = result if version.startswith("1.") else without_1_1_interface_fields(result)
    assert result.as_version(version) == replace(expected, cni_version=version)


def _shuffle_case(value: Any, upper: bool) -> Any:
    if isinstance(value, dict):
        return {
            (key.upper() if upper else key.lower()): _shuffle_case(item, not upper)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_shuffle_case(item, upper) for item in value]
    return value


@settings(max_examples=50)
@given(results, st.sampled_from(LIST_AND_MODERN), st.booleans())
def test_keys_are_read_case_insensitively(result: Result, version: str, upper: bool) -> None:
    written = result.to_dict(version)
    assert Result.from_dict(_shuffle_case(written, upper)) == Result.from_dict(written)


@settings(max_examples=150)
@given(results, st.sampled_from(("0.1.0", "0.2.0")))
def test_legacy_round_trip_keeps_first_v4_and_first_v6(result: Result, legacy: str) -> None:
    first4 = next((ip for ip in result.ips if ip.version == "4"), None)
    first6 = next((ip for ip in result.ips if ip.version == "6"), None)
    if first4 is None and first6 is None:
        with pytest.raises(CNIError, match="cannot convert: no valid IP addresses"):
            result.to_dict(legacy)
        return
    back = Result.from_dict(result.to_dict(legacy)).as_version("1.1.0")
    kept = [ip for ip in (first4, first6) if ip is not None]
    assert back.ips == [IPConfig(ip.address, ip.gateway) for ip in kept]
    assert back.interfaces == []
    assert back.dns == result.dns
    v4_routes = [Route(r.dst, r.gw) for r in result.routes if isinstance(r.dst, IPv4Network)]
    v6_routes = [Route(r.dst, r.gw) for r in result.routes if isinstance(r.dst, IPv6Network)]
    assert back.routes == (v4_routes if first4 else []) + (v6_routes if first6 else [])


# Result.to_json writes 1.x text straight from the records; the generic encoder (go_json of
# to_dict, itself json.dumps plus Go's escapes) is the reference it must match byte for byte.

mapped = st.integers(0, 2**32 - 1).map(lambda n: IPv6Address(0xFFFF00000000 + n))
any_address = v4_address | v6_address | mapped | st.just(IPv6Address("fe80::1%e<&>"))
mixed_ips = st.builds(
    IPConfig,
    st.builds(lambda a, p: IPv6Interface((a, p)), mapped, st.integers(96, 128)) | v4_interface,
    st.none() | any_address,
    st.none() | st.integers(0, 8),
)
mixed_routes = st.builds(
    Route,
    st.builds(lambda a, p: IPv6Network((a, p), strict=False), mapped, st.integers(96, 128)),
    st.none() | any_address,
)
stated_ips = st.builds(
    lambda ip, stated: replace(ip, stated_version=stated),
    ip_configs | mixed_ips,
    st.none() | st.sampled_from(["", "4", "6", "x<"]),
)
written_results = st.builds(
    Result,
    cni_version=st.sampled_from(("1.0.0", "1.1.0", "", *LIST_AND_MODERN)),
    interfaces=st.lists(interfaces, max_size=3),
    ips=st.lists(stated_ips, max_size=4),
    routes=st.lists(routes | mixed_routes, max_size=4),
    dns=dns | st.just(DNS()),
)


def generic_json(result: Result, version: str | None) -> str:
    data = result.to_dict(version)
    text = json.dumps(data, indent=4, ensure_ascii=False)
    assert go_json(data) == text.replace("<", "\\u003c").replace(">", "\\u003e").replace(
        "&", "\\u0026"
    ).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return go_json(data)


@settings(max_examples=300)
@given(written_results, st.sampled_from([None, *LIST_AND_MODERN]))
def test_to_json_writes_what_the_generic_encoder_writes(
    result: Result, version: str | None
) -> None:
    assert result.to_json(version) == generic_json(result, version)


@pytest.mark.parametrize("version", ["1.0.0", "0.4.0"])
@pytest.mark.parametrize(
    "odd",
    [
        Interface("eth0", mtu=True),  # type: ignore[arg-type]
        Interface(7),  # type: ignore[arg-type]
        Interface("eth0", mac=["a", "b"]),  # type: ignore[arg-type]
        DNS(nameservers=[1, None]),  # type: ignore[list-item]
        Route(IPv4Network("10.0.0.0/8"), table=1.5),  # type: ignore[arg-type]
        IPConfig(IPv4Interface("10.0.0.1/8"), stated_version=4),  # type: ignore[arg-type]
        IPConfig(IPv4Interface("10.0.0.1/8"), interface=False),  # type: ignore[arg-type]
    ],
)
def test_to_json_of_values_of_undeclared_types_is_the_generic_text(odd: Any, version: str) -> None:
    result = Result(version)
    if isinstance(odd, DNS):
        result.dns = odd
    else:
        {Interface: result.interfaces, Route: result.routes, IPConfig: result.ips}[
            type(odd)
        ].append(odd)
    assert result.to_json() == generic_json(result, None)


def test_to_json_of_an_unencodable_value_fails_as_the_generic_encoder_does() -> None:
    result = Result("1.0.0", [Interface("eth0", sandbox=object())])  # type: ignore[arg-type]
    with pytest.raises(TypeError) as generic:
        go_json(result.to_dict())
    with pytest.raises(TypeError) as ours:
        result.to_json()
    assert str(ours.value) == str(generic.value)


@given(v4_address, st.integers(0, 32))
def test_ipv4_texts_are_the_ipaddress_texts(address: IPv4Address, prefix: int) -> None:
    from pycni.spec.result import _cidr_text, _ip_text

    assert _ip_text(address) == str(address)
    assert _cidr_text(IPv4Interface((address, prefix))) == str(IPv4Interface((address, prefix)))
    network = IPv4Network((address, prefix), strict=False)
    assert _cidr_text(network) == str(network)
