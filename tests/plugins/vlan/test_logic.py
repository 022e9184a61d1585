"""vlan ADD/CHECK/DEL on the fake host: no root, no netns.

The node has one Ethernet-like link (``ens3``, a dummy in the fake) that the VLAN link hangs off.
"""

from __future__ import annotations

import pytest

from tests.plugin_logic import (
    failed,
    ok,
    with_prev,
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
    test_link_in_container_takes_the_master_from_the_pod,
)


@pytest.fixture
def plugin() -> str:
    """The plugin type the shared cases of tests/plugins/sublink_cases.py run with here."""
    return "vlan"


def test_vlan_check_sees_another_vlan_id() -> None:
    host = new_host()
    result = ok(host, "vlan", "ADD", conf("vlan"))
    assert failed(host, "vlan", "CHECK", with_prev(conf("vlan", vlanId=43), result)) == (
        "Error: link eth0 configured VLAN ID is 43, current value is 42"
    )
