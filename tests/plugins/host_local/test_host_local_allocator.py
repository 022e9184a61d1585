"""host-local allocation and store: the reference's test vectors on a real tmp directory."""

from __future__ import annotations

import io
import os
import stat
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest

from pycni.net.nsscan import LiveAddresses
from pycni.plugins.ipam.host_local.allocator import Allocator, candidates, free_count
from pycni.plugins.ipam.host_local.config import RangeSet, load
from pycni.plugins.ipam.host_local.plugin import PLUGIN
from pycni.plugins.ipam.host_local.store import Store
from pycni.skel.base import Request
from pycni.skel.host import REAL_HOST, Host, RealHost
from pycni.spec.errors import CNIError


def range_set(*ranges: dict[str, str]) -> RangeSet:
    config = {"name": "n", "cniVersion": "1.0.0", "ipam": {"ranges": [list(ranges)]}}
    return load(config, "").range_sets[0]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store("net", str(tmp_path))


def occupy(store: Store, *addresses: str) -> None:
    for a in addresses:
        Path(store.dir, a).write_text("other\r\neth0")


def set_last(store: Store, idx: int, text: str) -> None:
    Path(store.dir, f"last_reserved_ip.{idx}").write_text(text)


def get(store: Store, rs: RangeSet, cid: str = "c1", requested: str | None = None) -> str:
    req = ip_address(requested) if requested else None
    return str(Allocator(rs, store, 0).get(cid, "eth0", req).address)


# -- the vectors of the reference's allocator tests ----------------------------------------


def test_fresh_v4_gives_dot2(store: Store) -> None:
    assert get(store, range_set({"subnet": "10.0.0.0/29"})) == "10.0.0.2/29"


def test_fresh_v6_gives_2(store: Store) -> None:
    assert get(store, range_set({"subnet": "2001:db8:1::/64"})) == "2001:db8:1::2/64"


def test_fresh_slash30(store: Store) -> None:
    assert get(store, range_set({"subnet": "10.0.0.0/30"})) == "10.0.0.2/30"


def test_last_reserved_advances(store: Store) -> None:
    set_last(store, 0, "10.0.0.5")
    assert get(store, range_set({"subnet": "10.0.0.0/29"})) == "10.0.0.6/29"


def test_wraps_around_when_next_taken(store: Store) -> None:
    set_last(store, 0, "10.0.0.5")
    occupy(store, "10.0.0.6")
    assert get(store, range_set({"subnet": "10.0.0.0/29"})) == "10.0.0.2/29"


def test_last_outside_the_set_restarts(store: Store) -> None:
    set_last(store, 0, "10.9.9.9")
    assert get(store, range_set({"subnet": "10.0.0.0/29"})) == "10.0.0.2/29"


def test_last_with_whitespace_is_ignored(store: Store) -> None:
    set_last(store, 0, "10.0.0.5\n")
    assert get(store, range_set({"subnet": "10.0.0.0/29"})) == "10.0.0.2/29"


def test_full_except_last_gives_last(store: Store) -> None:
    occupy(store, "10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6")
    set_last(store, 0, "10.0.0.3")
    assert get(store, range_set({"subnet": "10.0.0.0/29"})) == "10.0.0.3/29"


def test_advances_into_next_range(store: Store) -> None:
    set_last(store, 0, "10.0.0.2")
    rs = range_set({"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"})
    assert get(store, rs) == "10.0.1.2/30"


def test_last_in_final_range_wraps_to_first(store: Store) -> None:
    set_last(store, 0, "10.0.2.2")
    rs = range_set({"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"}, {"subnet": "10.0.2.0/30"})
    assert get(store, rs) == "10.0.0.2/30"


def test_custom_gateway_makes_dot1_allocatable(store: Store) -> None:
    rs = range_set({"subnet": "10.0.0.0/29", "gateway": "10.0.0.6"})
    got = [get(store, rs, f"c{i}") for i in range(5)]
    assert got == [f"10.0.0.{i}/29" for i in (1, 2, 3, 4, 5)]
    with pytest.raises(CNIError) as info:
        get(store, rs, "c9")
    assert info.value.msg == "no IP addresses available in range set: 10.0.0.1-10.0.0.6"
    assert info.value.code == 11


def test_v4_broadcast_excluded_v6_all_ones_included() -> None:
    v4 = [str(a) for a, _ in candidates(range_set({"subnet": "10.0.0.0/29"}), None)]
    assert v4 == [f"10.0.0.{i}" for i in range(2, 7)]
    v6 = [str(a) for a, _ in candidates(range_set({"subnet": "fd00::/126"}), None)]
    assert v6 == ["fd00::2", "fd00::3"]


def test_iteration_covers_every_address_once_from_last() -> None:
    rs = range_set({"subnet": "10.0.0.0/29"}, {"subnet": "10.0.1.0/30"})
    order = [str(a) for a, _ in candidates(rs, ip_address("10.0.0.4"))]
    assert order == ["10.0.0.5", "10.0.0.6", "10.0.1.2", "10.0.0.2", "10.0.0.3", "10.0.0.4"]


def test_range_start_end_honoured(store: Store) -> None:
    rs = range_set({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.100", "rangeEnd": "10.0.0.101"})
    assert get(store, rs, "a") == "10.0.0.100/24"
    assert get(store, rs, "b") == "10.0.0.101/24"
    with pytest.raises(CNIError):
        get(store, rs, "c")


# -- requested addresses and duplicates ----------------------------------------------------


def test_requested_ip(store: Store) -> None:
    rs = range_set({"subnet": "10.0.0.0/24"})
    assert get(store, rs, requested="10.0.0.77") == "10.0.0.77/24"
    assert Path(store.dir, "last_reserved_ip.0").read_text() == "10.0.0.77"
    with pytest.raises(CNIError) as info:
        get(store, rs, "c2", requested="10.0.0.77")
    assert info.value.msg == (
        "requested IP address 10.0.0.77 is not available in range set 10.0.0.1-10.0.0.254"
    )
    with pytest.raises(CNIError) as info:
        get(store, rs, "c3", requested="10.0.0.1")
    assert info.value.msg == "requested ip 10.0.0.1 is subnet's gateway"


def test_duplicate_allocation_refused_also_for_legacy_files(store: Store) -> None:
    rs = range_set({"subnet": "10.0.0.0/24"})
    get(store, rs, "c1")
    with pytest.raises(CNIError) as info:
        get(store, rs, "c1")
    assert (
        info.value.msg == "10.0.0.2 has been allocated to c1, duplicate allocation is not allowed"
    )
    Path(store.dir, "10.0.0.50").write_text("old")
    with pytest.raises(CNIError, match=r"10\.0\.0\.50 has been allocated to old"):
        get(store, rs, "old")


# -- the files -------------------------------------------------------------------------------


def test_file_format(store: Store, tmp_path: Path) -> None:
    get(store, range_set({"subnet": "2001:db8:1::/64"}), "  c1 ")
    path = Path(store.dir, "2001:db8:1::2")
    assert path.read_bytes() == b"c1\r\neth0"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 & ~_umask()
    assert Path(store.dir, "last_reserved_ip.0").read_bytes() == b"2001:db8:1::2"
    assert stat.S_IMODE(Path(store.dir, "lock").stat().st_mode) == 0o750 & ~_umask()
    assert stat.S_IMODE(Path(store.dir).stat().st_mode) == 0o755 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_release_by_id_and_legacy_fallback(store: Store) -> None:
    Path(store.dir, "10.0.0.2").write_text("c1\r\neth0")
    Path(store.dir, "10.0.0.3").write_text("c1\r\neth1")
    Path(store.dir, "10.0.0.4").write_text("c1")
    Path(store.dir, "sub").mkdir()
    Path(store.dir, "sub", "10.0.0.5").write_text("c1\r\neth0\n")
    store.release_by_id("c1", "eth0")
    left = sorted(p.name for p in Path(store.dir).rglob("10.*"))
    assert left == ["10.0.0.3", "10.0.0.4"]
    store.release_by_id("c1", "eth0")  # nothing matches id+ifname any more: legacy fallback
    assert sorted(p.name for p in Path(store.dir).rglob("10.*")) == ["10.0.0.3"]
    assert store.find_by_id("c1", "eth1") and not store.find_by_id("c2", "eth0")


def test_free_count() -> None:
    rs = range_set({"subnet": "10.0.0.0/29"})
    assert free_count(rs, set()) == 5
    assert free_count(rs, {ip_address("10.0.0.2"), ip_address("10.0.0.1")}) == 4
    custom = range_set({"subnet": "10.0.0.0/29", "gateway": "10.0.0.100"})
    assert free_count(custom, set()) == 6


# -- the plugin verbs, in-process ------------------------------------------------------------


HOST: dict[str, Host] = {"": REAL_HOST}  # the host the requests below get (census sets it)


def request(command: str, config: dict[str, Any], cid: str = "c1", ifname: str = "eth0") -> Request:
    return Request(command, cid, "/x", ifname, "", [], config, b"", {}, host=HOST[""])


def netconf(tmp_path: Path, ranges: list[Any], **top: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": "net",
        "ipam": {"type": "host-local", "dataDir": str(tmp_path), "ranges": ranges},
        **top,
    }


def test_add_rolls_back_earlier_sets_on_failure(tmp_path: Path) -> None:
    config = netconf(tmp_path, [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/30"}]])
    occupy(Store("net", str(tmp_path)), "10.1.0.2")
    with pytest.raises(CNIError) as info:
        PLUGIN.add(request("ADD", config))
    assert info.value.msg == (
        "failed to allocate for range 1: no IP addresses available in range set: 10.1.0.1-10.1.0.2"
    )
    assert sorted(p.name for p in tmp_path.joinpath("net").iterdir() if p.name[0].isdigit()) == [
        "10.1.0.2"
    ]


def test_add_unused_requested_ip_fails_and_releases(tmp_path: Path) -> None:
    config = netconf(
        tmp_path,
        [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.20"}]],
        runtimeConfig={"ips": ["10.0.0.10"]},
    )
    with pytest.raises(CNIError) as info:
        PLUGIN.add(request("ADD", config))
    assert (info.value.code, info.value.msg) == (
        7,
        "failed to allocate all requested IPs: 10.0.0.10",
    )
    assert not [p for p in tmp_path.joinpath("net").iterdir() if p.name[0].isdigit()]


def test_requested_ips_go_to_their_sets(tmp_path: Path) -> None:
    config = netconf(
        tmp_path,
        [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/64"}], [{"subnet": "10.9.0.0/24"}]],
        args={"cni": {"ips": ["10.9.0.9", "fd00::9"]}},
    )
    result = PLUGIN.add(request("ADD", config))
    assert [str(i.address) for i in result.ips] == ["10.0.0.2/24", "fd00::9/64", "10.9.0.9/24"]
    assert [str(i.gateway) for i in result.ips] == ["10.0.0.1", "fd00::1", "10.9.0.1"]


class CensusHost(RealHost):
    """The real machine, but GC's scan of its live namespaces answers ``found``."""

    def __init__(self, found: LiveAddresses) -> None:
        self.found = found

    def live_addresses(self) -> LiveAddresses:
        return self.found


@pytest.fixture
def census(monkeypatch: pytest.MonkeyPatch) -> LiveAddresses:
    """What host-local's GC finds configured in the node's live namespaces (none here): the
    requests of these tests are handed a host whose scan answers it."""
    found = LiveAddresses()
    monkeypatch.setitem(HOST, "", CensusHost(found))
    return found


def test_gc_and_status(tmp_path: Path, census: LiveAddresses) -> None:
    config = netconf(tmp_path, [[{"subnet": "10.0.0.0/29"}]])
    for cid in ("a", "b", "c"):
        PLUGIN.add(request("ADD", config, cid))
    PLUGIN.status(request("STATUS", config))  # two addresses left
    PLUGIN.add(request("ADD", config, "a", "eth1"))
    Path(tmp_path, "net", "10.0.0.6").write_text("legacy")
    with pytest.raises(CNIError) as info:
        PLUGIN.status(request("STATUS", config))
    assert info.value.code == 50
    assert info.value.msg == "no IP addresses available in range set 0: 10.0.0.1-10.0.0.6"

    valid = [{"containerID": "a", "ifname": "eth0"}, {"containerID": "legacy", "ifname": "x"}]
    PLUGIN.gc(request("GC", {**config, "cni.dev/valid-attachments": valid}))
    names = sorted(p.name for p in tmp_path.joinpath("net").iterdir())
    assert names == ["10.0.0.2", "10.0.0.6", "last_reserved_ip.0", "lock"]
    PLUGIN.status(request("STATUS", config))
    PLUGIN.gc(request("GC", {**config, "cni.dev/valid-attachments": []}))
    assert sorted(p.name for p in tmp_path.joinpath("net").iterdir()) == [
        "last_reserved_ip.0",
        "lock",
    ]


def test_gc_keeps_a_stale_reservation_whose_address_a_live_namespace_has(
    tmp_path: Path, census: LiveAddresses
) -> None:
    """The runtime's list forgot a pod (or another runtime shares the store): its address
    is configured in a live namespace, so releasing it would hand it out twice."""
    config = netconf(tmp_path, [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/64"}]])
    for cid in ("a", "b"):
        PLUGIN.add(request("ADD", config, cid))
    census.addresses = {"10.0.0.3", "fd00::3"}  # b's addresses, canonical text
    stderr = io.StringIO()
    req = request("GC", {**config, "cni.dev/valid-attachments": []})
    req.stderr = stderr
    PLUGIN.gc(req)
    names = sorted(p.name for p in tmp_path.joinpath("net").iterdir() if p.name[0].isdigit())
    assert names == ["10.0.0.3"] and "kept 10.0.0.3" in stderr.getvalue()
    assert sorted(p.name for p in tmp_path.joinpath("net").iterdir() if ":" in p.name) == [
        "fd00::3"
    ]


def test_gc_goes_on_when_the_scan_is_not_complete_keeping_what_it_saw(
    tmp_path: Path, census: LiveAddresses
) -> None:
    """The runtime's list is authoritative: a scan that could not see everything (a local
    user's held namespace, a partial view) keeps what it saw, logs why, and blocks nothing."""
    config = netconf(tmp_path, [[{"subnet": "10.0.0.0/29"}]])
    for cid in ("a", "b", "c"):
        PLUGIN.add(request("ADD", config, cid))
    census.complete = False
    census.problems = ["cannot read the addresses in namespace /proc/9/ns/net: EPERM"]
    census.addresses = {"10.0.0.3"}  # b's, seen in a live namespace
    stderr = io.StringIO()
    req = request(
        "GC", {**config, "cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}]}
    )
    req.stderr = stderr
    PLUGIN.gc(req)
    names = sorted(p.name for p in tmp_path.joinpath("net").iterdir() if p.name[0].isdigit())
    assert names == ["10.0.0.2", "10.0.0.3"]  # a listed, b seen live; c freed
    assert "cannot read the addresses in namespace /proc/9/ns/net" in stderr.getvalue()


def test_status_and_gc_on_a_missing_directory_create_nothing(tmp_path: Path) -> None:
    config = netconf(tmp_path / "none", [[{"subnet": "10.0.0.0/29"}]])
    PLUGIN.status(request("STATUS", config))
    PLUGIN.gc(request("GC", {**config, "cni.dev/valid-attachments": []}))
    assert not (tmp_path / "none").exists()


def test_check_and_delete(tmp_path: Path) -> None:
    config = netconf(tmp_path, [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/64"}]])
    PLUGIN.add(request("ADD", config, "a"))
    PLUGIN.check(request("CHECK", config, "a"))
    with pytest.raises(CNIError) as info:
        PLUGIN.check(request("CHECK", config, "b"))
    assert info.value.msg == "host-local: Failed to find address added by container b"
    PLUGIN.delete(request("DEL", config, "b"))
    PLUGIN.delete(request("DEL", config, "a"))
    assert not [p for p in tmp_path.joinpath("net").iterdir() if p.name[0] in "1f"]
