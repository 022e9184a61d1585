"""Property tests for config parsing and the Go-style JSON encoder."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pycni.spec import version
from pycni.spec.conf import ConfError, conf_list_from_bytes, go_marshal, plugin_conf_from_bytes

json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False, width=64),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.from_regex(r"\A[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,12}\Z")
reserved = {"type", "name", "cniversion", "capabilities", "ipam", "dns", "prevresult"}
extras = st.dictionaries(
    st.text(min_size=1, max_size=6).filter(lambda k: k.lower() not in reserved),
    json_values,
    max_size=4,
)


def _numbers_as_floats(value: Any) -> Any:
    """Go decodes every JSON number as float64, so compare numbers as floats."""
    if isinstance(value, dict):
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


@settings(max_examples=60)
@given(json_values)
def test_go_marshal_round_trips(value: Any) -> None:
    assert _numbers_as_floats(json.loads(go_marshal(value))) == _numbers_as_floats(value)


@settings(max_examples=60)
@given(names, st.lists(st.tuples(names, extras), min_size=1, max_size=4))
def test_plugins_pass_through_unchanged(
    name: str, plugins: list[tuple[str, dict[str, Any]]]
) -> None:
    objects = [{"type": ptype, **extra} for ptype, extra in plugins]
    raw = json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": objects}).encode()
    conf = conf_list_from_bytes(raw)
    assert conf.name == name
    assert conf.raw == raw
    expected = _numbers_as_floats(objects)
    assert _numbers_as_floats([p.network for p in conf.plugins]) == expected
    for plugin in conf.plugins:
        assert plugin_conf_from_bytes(plugin.raw).network == plugin.network


versions = st.sampled_from([*version.ALL, "1.2.0", "2.0.0", "0.5", "1"])


@given(st.one_of(st.just(""), versions), st.lists(versions, max_size=5))
def test_selected_version_is_highest_supported(given_version: str, listed: list[str]) -> None:
    fields: dict[str, Any] = {"name": "n", "cniVersions": listed, "plugins": [{"type": "a"}]}
    if given_version:
        fields["cniVersion"] = given_version
    selected = conf_list_from_bytes(json.dumps(fields).encode()).cni_version
    current = version.parse(version.CURRENT)
    candidates = [v for v in [*listed, given_version] if v and version.parse(v) <= current]
    if candidates:
        assert version.parse(selected) == max(version.parse(v) for v in candidates)
    else:
        assert selected == given_version


@given(
    st.sampled_from(["true", "false"]).flatmap(
        lambda w: st.tuples(st.just(w), st.lists(st.booleans(), min_size=len(w), max_size=len(w)))
    )
)
def test_bool_strings_any_case(case: tuple[str, list[bool]]) -> None:
    word, upper = case
    spelled = "".join(c.upper() if u else c for c, u in zip(word, upper, strict=True))
    conf = conf_list_from_bytes(json.dumps({"name": "n", "disableCheck": spelled}).encode())
    assert conf.disable_check is (word == "true")


@settings(max_examples=60)
@given(json_values)
def test_arbitrary_json_never_crashes(value: Any) -> None:
    raw = json.dumps(value).encode()
    try:
        conf_list_from_bytes(raw)
    except ConfError as err:
        assert err.code == 7
    try:
        plugin_conf_from_bytes(raw)
    except ConfError as err:
        assert err.code == 7
