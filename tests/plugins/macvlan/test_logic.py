"""macvlan ADD/CHECK/DEL/GC on the fake host: no root, no netns.

The node has one Ethernet-like link (``ens3``, a dummy in the fake) that the macvlan hangs off.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.plugin_logic import (
    POD,
    failed,
    ok,
    picture,
)
from tests.plugins.sublink_cases import (  # noqa: F401  (the shared cases run here)
    STATIC,
    conf,
    hostdev_conf,
    new_host,
    test_a_failure_at_each_step_leaves_node_and_pod_as_they_were,
    test_a_missing_master_is_an_error_that_leaves_nothing,
    test_add_makes_the_sublink_in_the_pod_with_ipam_addresses,
    test_an_mtu_above_the_masters_is_refused,
    test_check_fails_on_a_changed_pod,
    test_del_is_idempotent,
    test_gc_goes_on_to_the_ipam_plugin,
    test_link_in_container_takes_the_master_from_the_pod,
)


@pytest.fixture
def plugin() -> str:
    """The plugin type the shared cases of tests/plugins/sublink_cases.py run with here."""
    return "macvlan"


def test_macvlan_without_ipam_is_l2_and_up() -> None:
    host = new_host()
    c = conf("macvlan", mode="private")
    del c["ipam"]
    result = ok(host, "macvlan", "ADD", c)
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.up and eth0.macvlan_mode == 1  # MACVLAN_MODE_PRIVATE
    assert "ips" not in result
    assert picture(host)[POD]["addresses"] == [("lo", "127.0.0.1/8", 254), ("lo", "::1/128", 254)]


@pytest.mark.parametrize("bcqueuelen", [0, 1, 2**32 - 1])
def test_macvlan_asks_the_kernel_for_its_bcqueuelen(bcqueuelen: int) -> None:
    host = new_host()
    ok(host, "macvlan", "ADD", conf("macvlan", bcqueuelen=bcqueuelen))
    (eth0,) = [link for link in host.pods[POD].links.values() if link.name == "eth0"]
    assert eth0.macvlan_bc_queue_len == bcqueuelen


@pytest.mark.parametrize("value", [-1, 2**32, "10", 2.5, True])
def test_macvlan_refuses_a_bcqueuelen_that_is_no_uint32(value: Any) -> None:
    host = new_host()
    before = picture(host)
    msg = failed(host, "macvlan", "ADD", conf("macvlan", bcqueuelen=value))
    assert msg.startswith("invalid config: bcqueuelen must be a number in [0, 4294967295]"), msg
    assert picture(host) == before
