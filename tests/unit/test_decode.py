"""spec.decode: every field kind, Go-style key matching, ranges, and paths in messages."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from pycni.record import record
from pycni.spec.decode import (
    CIDR,
    IP,
    MAC,
    Bool,
    IfName,
    Int,
    ListOf,
    MapOf,
    Obj,
    Raw,
    Str,
    decode,
    lookup,
    option,
    present,
    section,
    shown,
)
from pycni.spec.errors import CNIError, InvalidConfig


@record(frozen=True)
class Inner:
    subnet: Any = option("subnet", CIDR())
    gateway: Any = option("gateway", IP())


@record(frozen=True)
class Conf:
    flag: bool = option("flag", Bool(), False)
    mtu: int = option("mtu", Int(0, 65535), 0)
    big: int = option("big", Int(), 0)
    mode: str = option("mode", Str(choices=("a", "b")), "a")
    text: str = option("text", Str(max_len=8), "")
    code: str = option(
        "code",
        Str(valid=lambda v: v.isascii() and v.isalpha() and v.islower(), what="lower-case letters"),
        "",
    )
    bridge: str = option("bridge", IfName(), "cni0")
    mac: Any = option("mac", MAC())
    ranges: list[list[Inner]] = option("ranges", ListOf(ListOf(Obj(Inner))), factory=list)
    sysctl: dict[str, str] = option("sysctl", MapOf(Str()), factory=dict)
    raw: dict[str, Any] = option("raw", Raw(), factory=dict)
    maybe: int | None = option("maybe", Int(0, 10))


def err(data: dict[str, Any], path: str = "") -> str:
    with pytest.raises(InvalidConfig) as info:
        decode(Conf, data, path)
    assert info.value.code == 7
    return info.value.msg


def test_defaults_when_absent_or_null() -> None:
    assert decode(Conf, {}) == Conf()
    assert decode(Conf, None) == Conf()
    nulls = dict.fromkeys(("flag", "mtu", "mode", "ranges", "sysctl", "raw", "maybe", "mac"))
    assert decode(Conf, nulls) == Conf()
    assert Conf().maybe is None and Conf().ranges == []


def test_every_kind_decodes_its_values() -> None:
    conf = decode(
        Conf,
        {
            "flag": True,
            "mtu": 1500.0,  # JSON numbers: an integral float is an integer
            "big": -(2**63),
            "mode": "b",
            "text": "12345678",
            "code": "abc",
            "bridge": "br-0.1",
            "mac": "02:AA:bb:cc:dd:ee",
            "ranges": [[{"subnet": "10.1.0.0/16", "gateway": "10.1.0.1"}], []],
            "sysctl": {"net.ipv4.ip_forward": "1"},
            "raw": {"any": [1, {"x": None}]},
            "maybe": 0,
        },
    )
    assert conf.flag is True and conf.mtu == 1500 and isinstance(conf.mtu, int)
    assert conf.big == -(2**63) and conf.mode == "b" and conf.code == "abc"
    assert conf.bridge == "br-0.1" and conf.mac == "02:AA:bb:cc:dd:ee"
    assert conf.ranges[0][0].subnet == ipaddress.ip_interface("10.1.0.0/16")
    assert conf.ranges[0][0].gateway == ipaddress.ip_address("10.1.0.1")
    assert conf.ranges[1] == []
    assert conf.sysctl == {"net.ipv4.ip_forward": "1"}
    assert conf.raw == {"any": [1, {"x": None}]} and conf.maybe == 0


def test_keys_match_case_insensitively_exact_first() -> None:
    assert decode(Conf, {"MTU": 9000}).mtu == 9000
    assert decode(Conf, {"Flag": True}).flag is True
    assert decode(Conf, {"MTU": 1, "mtu": 2}).mtu == 2  # the exact key wins
    assert decode(Conf, {"Mtu": 1, "MTU": 2}).mtu == 1  # else the first match
    assert lookup({"IPMasq": 1}, "ipMasq") == (True, 1)
    assert lookup({}, "x") == (False, None)
    assert present({"X": 0}, "x") and not present({"x": None}, "x") and not present(None, "x")


def test_unknown_keys_are_ignored() -> None:
    assert decode(Conf, {"somethingElse": object()}) == Conf()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flag": "yes"}, 'invalid config: flag must be a boolean, got "yes"'),
        ({"flag": 1}, "invalid config: flag must be a boolean, got 1"),
        ({"mtu": "big"}, 'invalid config: mtu must be a number in [0, 65535], got "big"'),
        ({"mtu": True}, "invalid config: mtu must be a number in [0, 65535], got true"),
        ({"mtu": 1.5}, "invalid config: mtu must be a number in [0, 65535], got 1.5"),
        ({"mtu": -1}, "invalid config: mtu must be a number in [0, 65535], got -1"),
        ({"mtu": 2**32 + 1}, "invalid config: mtu must be a number in [0, 65535], got 4294967297"),
        ({"mtu": [1500]}, "invalid config: mtu must be a number in [0, 65535], got [1500]"),
        (
            {"big": 2**63},
            "invalid config: big must be a number (an integer), got 9223372036854775808",
        ),
        ({"mode": "c"}, 'invalid config: mode must be one of "a", "b", got "c"'),
        ({"text": "123456789"}, "invalid config: text must be at most 8 characters, got 9"),
        ({"text": "a\x00"}, 'invalid config: text must not contain NUL, got "a\\u0000"'),
        ({"text": "\ud800"}, 'invalid config: text must be valid UTF-8 text, got "\\ud800"'),
        ({"code": "ab1"}, 'invalid config: code must be lower-case letters, got "ab1"'),
        (
            {"mac": "zz"},
            'invalid config: mac must be a MAC address like 02:aa:bb:cc:dd:ee, got "zz"',
        ),
        ({"raw": []}, "invalid config: raw must be an object, got []"),
        ({"maybe": 11}, "invalid config: maybe must be a number in [0, 10], got 11"),
        ({"sysctl": {"k": 1}}, "invalid config: sysctl.k must be a string, got 1"),
        ({"sysctl": []}, "invalid config: sysctl must be an object of strings, got []"),
    ],
)
def test_a_wrong_value_names_the_field_and_what_is_allowed(
    data: dict[str, Any], message: str
) -> None:
    assert err(data) == message


def test_nested_paths_name_list_indices_and_keys() -> None:
    bad = {"ranges": [[{"subnet": "10.0.0.0/8"}, {"subnet": "x"}]]}
    assert err(bad, "ipam") == (
        'invalid config: ipam.ranges[0][1].subnet must be a CIDR like 10.1.0.0/16, got "x"'
    )
    assert err({"ranges": [[{"gateway": "10.0.0.300"}]]}) == (
        'invalid config: ranges[0][0].gateway must be an IP address like 10.1.0.1, got "10.0.0.300"'
    )
    assert err({"ranges": [5]}) == ("invalid config: ranges[0] must be a list of objects, got 5")
    assert err({"ranges": "10.0.0.0/8"}).startswith("invalid config: ranges must be a list of ")


@pytest.mark.parametrize("name", ["", "eth0", "a" * 15, "br-x.1_2"])
def test_interface_names_allowed(name: str) -> None:
    assert decode(Conf, {"bridge": name}).bridge == name


@pytest.mark.parametrize(
    "name", ["a" * 16, ".", "..", "a/b", "a:b", "a b", "a\nb", "a\tb", "é" * 8, 5, []]
)
def test_interface_names_refused(name: Any) -> None:
    assert err({"bridge": name}).startswith("invalid config: bridge must be a string naming")


def test_interface_name_required() -> None:
    @record(frozen=True)
    class Needs:
        dev: str = option("dev", IfName(required=True), "x")

    with pytest.raises(InvalidConfig, match="dev must be a string naming an interface"):
        decode(Needs, {"dev": ""})


def test_messages_override_for_reference_wording() -> None:
    @record(frozen=True)
    class Ref:
        vlan: int = option("vlan", Int(0, 4094, "invalid VLAN ID {value}"), 0)
        backend: str = option("b", Str(choices=("x",), message='unknown backend "{raw}"'), "x")
        ip: Any = option("ip", IP("invalid IP address: {value}"))

    for data, message in (
        ({"vlan": 5000}, "invalid VLAN ID 5000"),
        ({"b": "pf"}, 'unknown backend "pf"'),
        ({"ip": "nope"}, "invalid IP address: nope"),
        ({"vlan": "x"}, 'invalid config: vlan must be a number in [0, 4094], got "x"'),
    ):
        with pytest.raises(InvalidConfig) as info:
            decode(Ref, data)
        assert info.value.msg == message


def test_lists_and_maps_are_bounded() -> None:
    @record(frozen=True)
    class Small:
        items: list[int] = option("items", ListOf(Int(), max_items=3), factory=list)
        names: dict[str, str] = option("names", MapOf(Str(), max_items=1), factory=dict)

    assert decode(Small, {"items": [1, 2, 3]}).items == [1, 2, 3]
    with pytest.raises(InvalidConfig, match=r"items must have at most 3 entries, got 4"):
        decode(Small, {"items": [1, 2, 3, 4]})
    with pytest.raises(InvalidConfig, match=r"names must have at most 1 entries, got 2"):
        decode(Small, {"names": {"a": "1", "b": "2"}})
    with pytest.raises(InvalidConfig, match="must not contain NUL"):
        decode(Small, {"names": {"a\x00": "1"}})


def test_section_and_shown() -> None:
    assert section({"Ipam": {"type": "x"}}, "ipam") == {"type": "x"}
    assert section({}, "ipam") == {} and section({"ipam": None}, "ipam") == {}
    with pytest.raises(InvalidConfig, match=r"^invalid config: a\.ipam must be an object, got 3$"):
        section({"ipam": 3}, "ipam", "a")
    long = shown("x" * 1000)
    assert len(long) == 64 and long.endswith("...")
    assert shown({"a": True}) == '{"a": true}'


def test_error_classes_carry_their_codes() -> None:
    from pycni.spec import errors

    pairs = [
        (errors.IncompatibleVersion, 1),
        (errors.UnsupportedField, 2),
        (errors.UnknownContainer, 3),
        (errors.InvalidEnv, 4),
        (errors.IOFailure, 5),
        (errors.DecodingFailure, 6),
        (errors.InvalidConfig, 7),
        (errors.InvalidNetNS, 8),
        (errors.TryAgainLater, 11),
        (errors.PluginNotAvailable, 50),
        (errors.LimitedConnectivity, 51),
        (errors.InternalError, 999),
    ]
    for cls, code in pairs:
        e = cls("m", "d")
        assert isinstance(e, CNIError) and e.code == code and str(e) == "m; d"
        assert e == CNIError(code, "m", "d")
        assert e.to_dict("1.0.0") == {
            "cniVersion": "1.0.0",
            "code": code,
            "msg": "m",
            "details": "d",
        }
    import pickle

    again = pickle.loads(pickle.dumps(errors.InvalidConfig("m", "d")))
    assert isinstance(again, errors.InvalidConfig) and again.details == "d"


def test_kinds_are_immutable_values() -> None:
    """The field kinds behave as frozen dataclasses did: equal by value, hashable, no
    assignment, and copy/deepcopy/pickle give an equal value."""
    import copy
    import pickle

    from pycni.spec.decode import ListOf, Str

    kind = ListOf(Str(max_len=8, choices=("a", "b")), max_items=3)
    assert kind == ListOf(Str(max_len=8, choices=("a", "b")), max_items=3)
    assert kind != ListOf(Str(max_len=9, choices=("a", "b")), max_items=3)
    assert hash(kind) == hash(copy.deepcopy(kind))
    assert copy.copy(kind) == kind and pickle.loads(pickle.dumps(kind)) == kind
    assert "max_items=3" in repr(kind)
    with pytest.raises(AttributeError):
        kind.max_items = 4
