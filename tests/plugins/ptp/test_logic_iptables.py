"""ptp's ipMasq with the iptables backend through skel on a FakeHost: no root (the cases are
tests/plugins/masquerade_iptables_cases.py, shared with the other plugin that masquerades)."""

from __future__ import annotations

import pytest

from tests.plugins.masquerade_iptables_cases import (  # noqa: F401  (the shared cases run here)
    test_a_failure_at_each_step_leaves_node_pod_and_tables_as_they_were,
    test_add_masquerades_with_the_references_chain_and_check_passes,
    test_del_removes_the_chain_and_the_jump,
    test_gc_removes_the_chains_of_attachments_no_longer_valid,
    test_without_ipmasq_no_table_is_touched,
)


@pytest.fixture
def plugin() -> str:
    """The plugin type the shared cases run with here."""
    return "ptp"
