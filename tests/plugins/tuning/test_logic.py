"""tuning ADD/CHECK/DEL on the fake host: no root, no netns.

Chained after a plugin that made the pod interface; here the test makes it (a dummy ``eth0``
with an address and routes) and hands the plugin a prevResult naming it.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from tests.plugin_logic import (
    CHAINED_PREV,
    POD,
    assert_each_step_rolls_back,
    failed,
    ok,
    picture,
    pod_with_eth0,
    with_prev,
)

NET = ipaddress.ip_network
IP = ipaddress.ip_address

PREV = CHAINED_PREV


def tuning_conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return with_prev(
        {
            "cniVersion": "1.0.0",
            "name": "tuning-net",
            "type": "tuning",
            "dataDir": str(tmp_path),
            "sysctl": {
                "net.ipv4.conf.IFNAME.arp_ignore": "1",
                "net.ipv6.conf.IFNAME.accept_ra": "0",
            },
            "mtu": 1400,
            "promisc": True,
            **extra,
        },
        PREV,
    )


def test_tuning_sets_sysctls_and_link_attributes_and_del_puts_them_back(tmp_path: Path) -> None:
    host = pod_with_eth0()
    before = picture(host)
    conf = tuning_conf(tmp_path)
    assert ok(host, "tuning", "ADD", conf) == PREV
    pod = host.kernel(POD)
    sysctl = host.pods[POD].sysctl
    assert sysctl.read("net/ipv4/conf/eth0/arp_ignore") == "1"
    assert sysctl.read("net/ipv6/conf/eth0/accept_ra") == "0"
    eth0 = pod.find_link("eth0")
    assert eth0 is not None and eth0.mtu == 1400 and eth0.promiscuity == 1
    ok(host, "tuning", "CHECK", conf)
    sysctl.write("net/ipv6/conf/eth0/accept_ra", "1")
    assert failed(host, "tuning", "CHECK", conf) == (
        "Error: Tuning configured value of /proc/sys/net/ipv6/conf/eth0/accept_ra is 0, "
        "current value is 1"
    )
    ok(host, "tuning", "DEL", conf)
    after = picture(host)
    assert after == before
    ok(host, "tuning", "DEL", conf)
    assert picture(host) == before
    assert host.files.tree(str(tmp_path)) == {}  # the backup went with DEL


def test_tuning_refuses_a_sysctl_the_pod_does_not_have(tmp_path: Path) -> None:
    host = pod_with_eth0()
    before = picture(host)
    conf = tuning_conf(tmp_path, sysctl={"net.ipv6.conf.nosuch0.accept_ra": "0"})
    assert failed(host, "tuning", "ADD", conf) == (
        'sysctl "net.ipv6.conf.nosuch0.accept_ra" does not exist in the pod namespace'
    )
    assert picture(host) == before


def test_tuning_a_failure_at_each_step_leaves_the_pod_as_it_was(tmp_path: Path) -> None:
    host = pod_with_eth0()
    steps = assert_each_step_rolls_back(host, "tuning", tuning_conf(tmp_path))
    assert steps[:2] == ["backup", "sysctl"]
    assert host.files.tree(str(tmp_path)) == {}  # the backup went with DEL
