"""Config parsing: every libcni rule and its error text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pycni.spec.conf import (
    ConfError,
    conf_list_from_bytes,
    conf_list_from_conf,
    go_marshal,
    inject_conf,
    plugin_conf_from_bytes,
)

LIST = "error parsing configuration list"
PE = "error parsing configuration: json: cannot unmarshal "


def _list(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def _error(data: bytes) -> str:
    with pytest.raises(ConfError) as info:
        conf_list_from_bytes(data)
    assert info.value.code == 7
    return str(info.value)


def test_basic_list_keeps_bytes_and_unknown_keys() -> None:
    raw = _list(
        cniVersion="1.0.0",
        name="net",
        plugins=[{"type": "bridge", "weird": {"deep": [1, 2.5]}}, {"type": "portmap"}],
        extra=True,
    )
    conf = conf_list_from_bytes(raw)
    assert conf.name == "net" and conf.cni_version == "1.0.0"
    assert conf.raw == raw
    assert [p.type for p in conf.plugins] == ["bridge", "portmap"]
    assert conf.plugins[0].network["weird"] == {"deep": [1, 2.5]}
    assert conf.plugins[0].raw == b'{"type":"bridge","weird":{"deep":[1,2.5]}}'
    assert (conf.disable_check, conf.disable_gc, conf.load_only_inlined_plugins) == (
        False,
        False,
        False,
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", f"{LIST}: unexpected end of JSON input"),
        (_list(cniVersion="1.0.0"), f"{LIST}: no name"),
        (_list(name=5), f"{LIST}: invalid name type float64"),
        (_list(name=None), f"{LIST}: invalid name type <nil>"),
        (_list(name="n", cniVersion=1), f"{LIST}: invalid cniVersion type float64"),
        (
            _list(name="n", cniVersions="1.0.0"),
            f"{LIST}: invalid type for cniVersions: []interface {{}}",
        ),
        (
            _list(name="n", cniVersions=["1.0.0", 3]),
            f"{LIST}: invalid type for cniVersions index 1: float64",
        ),
        (_list(name="n", plugins=[]), f"{LIST}: no plugins in list"),
        (
            _list(name="n", plugins={"type": "x"}),
            f"{LIST}: invalid 'plugins' type map[string]interface {{}}",
        ),
        (
            _list(name="n", plugins=[{"type": "a"}, {"ipam": {}}]),
            "failed to parse plugin config 1: error parsing configuration: missing 'type'",
        ),
        (_list(name="n", disableCheck="yes"), f'{LIST}: invalid value "yes" for disableCheck'),
        (_list(name="n", disableGC=1), f"{LIST}: invalid type float64 for disableGC"),
        (
            _list(name="n", loadOnlyInlinedPlugins=True),
            f"{LIST}: `loadOnlyInlinedPlugins` is true, and no 'plugins' key",
        ),
        (
            b"[1]",
            f"{LIST}: json: cannot unmarshal array into Go value of type map[string]interface {{}}",
        ),
    ],
)
def test_list_errors(data: bytes, message: str) -> None:
    assert _error(data) == message


def test_invalid_cni_versions_entry() -> None:
    text = _error(_list(name="n", cniVersions=["1.0.0", "1.x"]))
    assert text.startswith(f"{LIST}: invalid cniVersions entry 1.x at index 1: ")
    text = _error(_list(name="n", cniVersion="abc", cniVersions=["1.0.0"]))
    assert text.startswith(f"{LIST}: invalid cniVersion abc: ")


@pytest.mark.parametrize(
    ("version", "versions", "expected"),
    [
        ("0.4.0", ["1.0.0", "0.3.1"], "1.0.0"),
        ("1.0.0", ["0.3.1"], "1.0.0"),
        ("1.0.0", ["1.1.0", "2.0.0"], "1.1.0"),
        ("9.0.0", ["8.0.0"], "9.0.0"),  # all too new: cniVersion stays as given
        ("", ["0.4.0", "1.0"], "1.0"),
        ("", [], ""),
        ("1.0.0", [], "1.0.0"),
    ],
)
def test_cni_versions_selection(version: str, versions: list[str], expected: str) -> None:
    fields: dict[str, Any] = {"name": "n", "cniVersions": versions, "plugins": [{"type": "a"}]}
    if version:
        fields["cniVersion"] = version
    assert conf_list_from_bytes(_list(**fields)).cni_version == expected


def test_cni_version_not_validated_without_cni_versions() -> None:
    assert conf_list_from_bytes(_list(name="n", cniVersion="weird")).cni_version == "weird"


@pytest.mark.parametrize(
    ("value", "expected"), [(True, True), (False, False), ("TRUE", True), ("False", False)]
)
def test_bools_accept_strings(value: object, expected: bool) -> None:
    conf = conf_list_from_bytes(
        _list(
            name="n",
            disableCheck=value,
            disableGC=value,
            loadOnlyInlinedPlugins=value,
            plugins=[{"type": "a"}],
        )
    )
    assert conf.disable_check is expected
    assert conf.disable_gc is expected
    assert conf.load_only_inlined_plugins is expected


def test_list_without_plugins_key_is_empty() -> None:
    assert conf_list_from_bytes(_list(name="n")).plugins == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"name":"n"}', "error parsing configuration: missing 'type'"),
        (b'{"type":""}', "error parsing configuration: missing 'type'"),
        (
            b'{"type":5}',
            PE + "number into Go struct field PluginConf.type of type string",
        ),
        (
            b'{"type":"a","capabilities":{"x":"yes"}}',
            PE + "string into Go struct field PluginConf.capabilities of type bool",
        ),
        (
            b'{"type":"a","ipam":[]}',
            PE + "array into Go struct field PluginConf.ipam of type types.IPAM",
        ),
        (
            b'{"type":"a","dns":{"nameservers":"1.1.1.1"}}',
            PE + "string into Go struct field PluginConf.dns.nameservers of type []string",
        ),
        (
            b'"x"',
            PE + "string into Go value of type types.PluginConf",
        ),
        (
            b'{"type": NaN}',
            "error parsing configuration: invalid character 'N' looking for beginning of value",
        ),
    ],
)
def test_plugin_errors(data: bytes, message: str) -> None:
    with pytest.raises(ConfError) as info:
        plugin_conf_from_bytes(data)
    assert str(info.value) == message


def test_plugin_fields_match_case_insensitively_like_go() -> None:
    plugin = plugin_conf_from_bytes(b'{"Type":"bridge","NAME":"x"}')
    assert (plugin.type, plugin.name) == ("bridge", "x")
    assert plugin.description() == 'type="bridge" name="x"'


def test_conf_list_from_conf_wraps_single_plugin() -> None:
    single = plugin_conf_from_bytes(b'{"cniVersion":"0.3.1","name":"old","type":"bridge","a<b":1}')
    conf = conf_list_from_conf(single)
    assert conf.name == "old" and conf.cni_version == "0.3.1"
    assert conf.raw == (
        b'{"cniVersion":"0.3.1","name":"old","plugins":[{"a\\u003cb":1,"cniVersion":"0.3.1",'
        b'"name":"old","type":"bridge"}]}'
    )
    assert [p.type for p in conf.plugins] == ["bridge"]


def test_inject_conf_rules() -> None:
    plugin = plugin_conf_from_bytes(b'{"type":"a","z":1}')
    injected = inject_conf(plugin, {"name": "n", "runtimeConfig": {"b": 2, "a": 1}})
    assert injected.raw == b'{"name":"n","runtimeConfig":{"a":1,"b":2},"type":"a","z":1}'
    with pytest.raises(ConfError, match="keys cannot be empty"):
        inject_conf(plugin, {"": 1})
    with pytest.raises(ConfError, match="key 'k' value must not be nil"):
        inject_conf(plugin, {"k": None})
    with pytest.raises(ConfError, match="missing 'type'"):
        inject_conf(plugin, {"type": ""})


def test_go_marshal_numbers_and_escapes() -> None:
    assert (
        go_marshal([1, 2.0, 0.5, 1e-7, 1e21, 123456789.25]) == b"[1,2,0.5,1e-07,1e+21,123456789.25]"
    )
    assert (
        go_marshal({"b": "<&>", "a": "é\u2028"})
        == b'{"a":"\xc3\xa9\\u2028","b":"\\u003c\\u0026\\u003e"}'
    )
