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
