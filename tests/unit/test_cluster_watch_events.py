"""Watch events carry the changed lease (the agent's cheap path needs its value), and
whatever etcd sends is read without crashing the watch."""

from __future__ import annotations

import base64
import ipaddress

from pycni.cluster import validate
from pycni.cluster.etcd import Etcd, _event
from pycni.cluster.lease import LeaseStore


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


KEY = "/pycni.dev/network/subnets/10.244.7.0-24"
VALUE = '{"PublicIP": "10.99.0.17", "BackendType": "host-gw", "BackendData": {}}'


def test_a_put_event_carries_the_key_value_and_revision() -> None:
    event = _event(
        {"kv": {"key": _b64(KEY), "value": _b64(VALUE), "mod_revision": "41", "lease": "7"}}
    )
    assert (event.kind, event.key, event.revision) == ("PUT", KEY, 41)
    assert event.kv is not None and event.kv.value == VALUE.encode() and event.kv.lease == 7


def test_a_delete_event_has_its_revision_and_no_value() -> None:
    event = _event({"type": "DELETE", "kv": {"key": _b64(KEY), "mod_revision": "42"}})
    assert (event.kind, event.key, event.revision) == ("DELETE", KEY, 42)
    assert event.kv is not None and event.kv.value == b""


def test_an_unreadable_event_has_no_kv_so_the_agent_lists_everything() -> None:
    for item in (
        {"kv": {"key": "not base64!", "mod_revision": "1"}},
        {"kv": {"key": _b64(KEY), "mod_revision": "many"}},
        {"kv": {"key": _b64(KEY), "mod_revision": {"x": 1}}},
        {"kv": "a string"},
        {},
    ):
        event = _event(item)
        assert event.kv is None and event.revision == 0, item


def test_the_store_parses_one_key_as_the_listing_does() -> None:
    store = LeaseStore(Etcd("http://127.0.0.1:1"))
    event = _event({"kv": {"key": _b64(KEY), "value": _b64(VALUE), "mod_revision": "3"}})
    assert event.kv is not None
    parsed = store.parse(event.kv)
    assert not isinstance(parsed, str)
    subnet, info = parsed
    assert subnet == ipaddress.ip_network("10.244.7.0/24")
    assert info.public_ip == ipaddress.ip_address("10.99.0.17")
    bad = _event({"kv": {"key": _b64(KEY + "x"), "value": _b64(VALUE), "mod_revision": "3"}})
    assert bad.kv is not None and "does not name a subnet" in str(store.parse(bad.kv))
    junk = _event({"kv": {"key": _b64(KEY), "value": _b64("[1]"), "mod_revision": "4"}})
    assert junk.kv is not None and "not a JSON object" in str(store.parse(junk.kv))


def test_rejections_from_events_add_to_those_of_the_last_full_pass() -> None:
    seen = validate.Rejections()
    assert seen.fresh([("a", 1, "bad")]) == ["ignoring lease a: bad"]
    assert seen.fresh([("b", 2, "worse")], complete=False) == ["ignoring lease b: worse"]
    assert seen.fresh([("a", 1, "bad")], complete=False) == []  # still known: not again
    seen.forget("a")
    assert seen.fresh([("a", 1, "bad")], complete=False) == ["ignoring lease a: bad"]
    assert seen.fresh([("b", 2, "worse")]) == []  # a full pass: a is forgotten
    assert seen.fresh([("a", 1, "bad")], complete=False) == ["ignoring lease a: bad"]
