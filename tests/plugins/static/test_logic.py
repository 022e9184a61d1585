"""static IPAM ADD/CHECK/DEL/GC on the fake host: no root, no netns.

static computes its result from the config, CNI_ARGS, ``args`` and runtimeConfig alone (the
precedence is held to the Go reference by test_static_kernel.py): here the calls go through
skel on a FakeHost, and the host (namespaces, netfilter, state files, processes) is asserted
untouched by every verb, as the reference's static touches nothing.
"""

from __future__ import annotations

from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import POD, failed, ok, picture, with_prev


def conf(**ipam: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": "statnet",
        "type": "static",
        "ipam": {"type": "static", **ipam},
    }


def new_host() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    return host


ADDRESSES = [
    {"address": "10.10.0.5/24", "gateway": "10.10.0.1"},
    {"address": "fd00:10::5/64"},
]


def test_add_answers_the_configured_addresses_and_touches_nothing() -> None:
    host = new_host()
    before = picture(host)
    result = ok(host, "static", "ADD", conf(addresses=ADDRESSES, routes=[{"dst": "0.0.0.0/0"}]))
    assert [ip["address"] for ip in result["ips"]] == ["10.10.0.5/24", "fd00:10::5/64"]
    assert result["ips"][0]["gateway"] == "10.10.0.1"
    assert result["routes"] == [{"dst": "0.0.0.0/0"}]
    assert picture(host) == before
    ok(host, "static", "CHECK", with_prev(conf(addresses=ADDRESSES), result))
    ok(host, "static", "DEL", conf(addresses=ADDRESSES))
    gc = {**conf(addresses=ADDRESSES), "cni.dev/valid-attachments": []}
    ok(host, "static", "GC", gc)
    assert picture(host) == before


def test_runtime_config_ips_take_precedence_over_the_config() -> None:
    host = new_host()
    config = {**conf(addresses=ADDRESSES), "runtimeConfig": {"ips": ["10.10.9.9/24"]}}
    config["capabilities"] = {"ips": True}
    result = ok(host, "static", "ADD", config)
    assert [ip["address"] for ip in result["ips"]] == ["10.10.9.9/24"]


def test_a_bad_address_is_a_config_error_and_leaves_nothing() -> None:
    host = new_host()
    before = picture(host)
    message = failed(host, "static", "ADD", conf(addresses=[{"address": "10.10.0.5/33"}]))
    assert "10.10.0.5/33" in message
    assert picture(host) == before
