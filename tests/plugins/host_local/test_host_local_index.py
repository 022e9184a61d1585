"""The in-memory owner index of a host-local store stays exact when other writers (another
process, the Go binary) change the directory between our calls."""

from __future__ import annotations

import ipaddress
import os
import shutil
from pathlib import Path

from pycni.plugins.ipam.host_local.store import Store


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def held(store: Store, cid: str, ifname: str = "eth0") -> list[str]:
    with store.locked():
        return sorted(str(a) for a in store.get_by_id(cid, ifname))


def test_index_follows_writers_outside_this_process(tmp_path: Path) -> None:
    with Store("net", str(tmp_path)) as store:
        with store.locked():
            assert store.reserve("a", "eth0", ip("10.0.0.2"), 0)
        assert held(store, "a") == ["10.0.0.2"]
        assert store._index() is None  # only under the lock
        with store.locked():
            assert store._index() is not None  # the index is in use under the lock
        # another writer: a new reservation, a rewritten owner and a removed file
        Path(store.dir, "10.0.0.3").write_text("a\r\neth0")
        assert held(store, "a") == ["10.0.0.2", "10.0.0.3"]
        Path(store.dir, "10.0.0.3").write_text("b\r\neth0")
        assert held(store, "a") == ["10.0.0.2"]
        assert held(store, "b") == ["10.0.0.3"]
        os.unlink(Path(store.dir, "10.0.0.2"))
        assert held(store, "a") == []
        # a legacy file holding only the container ID still counts, and is released
        Path(store.dir, "10.0.0.4").write_text("c")
        assert held(store, "c") == ["10.0.0.4"]
        with store.locked():
            store.release_by_id("c", "eth0")
        assert not Path(store.dir, "10.0.0.4").exists()
        assert held(store, "c") == []
        assert store.find_by_id("b", "eth0") and not store.find_by_id("a", "eth0")


def test_bookkeeping_files_never_count_as_reservations(tmp_path: Path) -> None:
    """``last_reserved_ip.<set>`` holds an address; a container whose ID is that address
    (a legacy owner key) owns no reservation by it, with the index as with a scan."""
    with Store("net", str(tmp_path)) as store:
        held(store, "x")  # index built
        with store.locked():
            assert store.reserve("a", "eth0", ip("10.0.0.2"), 0)  # rewrites last_reserved_ip.0
        assert held(store, "10.0.0.2") == []
        assert not store.find_by_id("10.0.0.2", "eth0")
        with store.locked():
            store.release_by_id("10.0.0.2", "eth0")
        assert Path(store.dir, "last_reserved_ip.0").read_text() == "10.0.0.2"


def test_index_survives_the_directory_being_replaced(tmp_path: Path) -> None:
    with Store("net", str(tmp_path)) as store:
        with store.locked():
            assert store.reserve("a", "eth0", ip("10.0.0.2"), 0)
        assert held(store, "a") == ["10.0.0.2"]
    shutil.rmtree(tmp_path / "net")
    with Store("net", str(tmp_path)) as store:
        assert held(store, "a") == []
        Path(store.dir, "10.0.0.9").write_text("a\r\neth0")
        assert held(store, "a") == ["10.0.0.9"]


def test_a_subdirectory_falls_back_to_walking_it(tmp_path: Path) -> None:
    with Store("net", str(tmp_path)) as store:
        held(store, "a")  # index built
        sub = Path(store.dir, "sub")
        sub.mkdir()
        (sub / "10.0.0.7").write_text("a\r\neth0")  # the reference's walk finds this one
        assert held(store, "a") == ["10.0.0.7"]
        with store.locked():
            assert store._index() is None


def _reserve_files(directory: Path, count: int) -> None:
    directory.mkdir(parents=True)
    for i in range(count):
        (directory / f"10.9.{i // 250}.{i % 250 + 2}").write_text(f"ctr{i}\r\neth0")


def test_a_restarted_daemon_warms_the_indexes_it_had(tmp_path: Path) -> None:
    """The journal lists the directories indexed; warming a fresh registry from it builds
    their indexes before any call, keeps only plain directories that still exist, and the
    warmed index answers like a scan."""
    from pycni.plugins.ipam.host_local import index as idx
    from pycni.plugins.ipam.host_local.store import is_reservation_name, read_owner

    journal = str(tmp_path / "run" / "host-local-dirs")
    (tmp_path / "run").mkdir()
    net_a, net_b = tmp_path / "a" / "net", tmp_path / "b" / "net"
    _reserve_files(net_a, 30)
    _reserve_files(net_b, 3)
    first = idx.Registry()
    first.warm(journal, read_owner, is_reservation_name)  # no journal yet: nothing
    assert first.owners(str(net_a), read_owner, is_reservation_name) is not None
    assert first.owners(str(net_b), read_owner, is_reservation_name) is not None
    first.owners(str(net_a), read_owner, is_reservation_name)  # once in the journal
    assert Path(journal).read_text().splitlines() == [str(net_a), str(net_b)]
    # b replaced by a symlink, plus junk lines: neither is warmed nor kept
    shutil.rmtree(net_b)
    os.symlink(net_a, net_b)
    with open(journal, "a") as f:
        f.write("relative/dir\n/does/not/exist\n\n")
    second = idx.Registry()
    assert second.warm(journal, read_owner, is_reservation_name) == [str(net_a)]
    assert Path(journal).read_text().splitlines() == [str(net_a)]
    warm = second._by_path[str(net_a)]
    assert warm.valid and len(warm.content) == 30
    assert warm.owners["ctr7\r\neth0"] == {"10.9.0.9"}
    # the warm index still follows later writers
    (net_a / "10.9.0.200").write_text("late\r\neth0")
    current = second.owners(str(net_a), read_owner, is_reservation_name)
    assert current is warm and current.owners["late\r\neth0"] == {"10.9.0.200"}
