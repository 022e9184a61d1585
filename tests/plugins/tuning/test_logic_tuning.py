"""tuning's backup file on the fake host (FakeStateFiles): ADD writes what it replaced in the
reference's layout (``<dataDir>/<containerID>_<ifname>.json``, mode 0600, Go's indented JSON),
DEL puts it back and removes the file, a backup the Go reference wrote is restored too, and a
failure at each rollback step leaves pod and files as they were. Rootless."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from pycni.skel.fake_host import FakeHost
from tests.plugin_logic import (
    CONTAINER_ID,
    POD,
    assert_each_step_rolls_back,
    ok,
    picture,
    with_prev,
)

DATA = "/run/pycni/tuning-test"
BACKUP = f"{DATA}/{CONTAINER_ID}_eth0.json"
PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": POD}],
    "ips": [{"address": "10.56.0.5/24", "interface": 0}],
}


def pod() -> FakeHost:
    host = FakeHost()
    host.add_pod(POD)
    k = host.kernel(POD)
    k.add_dummy("eth0")
    eth0 = k.find_link("eth0")
    assert eth0 is not None
    k.set_link(eth0.index, up=True, mtu=1500)
    k.add_address(eth0.index, ipaddress.ip_interface("10.56.0.5/24"))
    return host


def conf(**extra: Any) -> dict[str, Any]:
    return with_prev(
        {
            "cniVersion": "1.0.0",
            "name": "tuning-net",
            "type": "tuning",
            "dataDir": DATA,
            "sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1"},
            "mtu": 1400,
            "promisc": True,
            **extra,
        },
        PREV,
    )


def test_add_writes_the_reference_backup_and_del_restores_and_removes_it() -> None:
    host = pod()
    before = picture(host)
    ok(host, "tuning", "ADD", conf())
    data, mode = host.files.tree(DATA)[BACKUP]
    assert mode == 0o600 and host.files.dirs[DATA] == 0o700
    assert json.loads(data) == {
        "promisc": False,
        "mtu": 1500,
        "sysctl": {"net/ipv4/conf/eth0/arp_ignore": "0"},
    }
    assert data.startswith(b'{\n "promisc": false,\n "mtu": 1500,')  # Go's MarshalIndent
    ok(host, "tuning", "DEL", conf())
    assert picture(host) == before
    assert BACKUP not in host.files.files


def test_a_second_add_keeps_the_first_originals() -> None:
    host = pod()
    ok(host, "tuning", "ADD", conf())
    ok(host, "tuning", "ADD", conf(mtu=1300))
    assert json.loads(host.files.read(BACKUP))["mtu"] == 1500
    ok(host, "tuning", "DEL", conf(mtu=1300))
    eth0 = host.kernel(POD).find_link("eth0")
    assert eth0 is not None and eth0.mtu == 1500


def test_del_restores_a_backup_the_reference_wrote() -> None:
    host = pod()
    k = host.kernel(POD)
    eth0 = k.find_link("eth0")
    assert eth0 is not None
    k.set_link(eth0.index, mtu=1400)
    host.files.write_atomic(BACKUP, b'{\n "mtu": 1500\n}')  # the Go plugin's ADD
    ok(host, "tuning", "DEL", conf())
    eth0 = k.find_link("eth0")
    assert eth0 is not None and eth0.mtu == 1500
    assert BACKUP not in host.files.files


def test_del_of_a_pod_that_is_gone_drops_the_backup() -> None:
    host = pod()
    ok(host, "tuning", "ADD", conf())
    host.remove_pod(POD)
    ok(host, "tuning", "DEL", conf())
    assert BACKUP not in host.files.files


def test_a_failure_at_each_step_leaves_the_pod_and_the_files_as_they_were() -> None:
    host = pod()
    steps = assert_each_step_rolls_back(host, "tuning", conf())  # picture() has the files
    assert steps[:2] == ["backup", "sysctl"]
    assert host.files.tree(DATA) == {}
