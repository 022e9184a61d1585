"""Crash-safe state: host-local reservations, the result cache and DHCP leases are durable
(file and directory fsynced) and keep their byte layout; corrupt cache files are skipped."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from pycni.net.ipmath import parse_ip
from pycni.plugins.ipam.dhcp.store import LeaseStore
from pycni.plugins.ipam.host_local.store import Store
from pycni.runtime import cache
from pycni.runtime.types import RuntimeConf
from pycni.spec.result import Result


def _record(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each fsync (of a dir or a file, with its name) and rename, in order."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        events.append(f"fsync {kind} {name}")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(f"rename {os.path.basename(dst)}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_a_reservation_is_durable_before_it_is_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store("net", str(tmp_path)) as store:
        events = _record(monkeypatch)
        assert store.reserve("cid", "eth0", parse_ip("10.1.0.5"), 0) is True
        assert store.reserve("other", "eth0", parse_ip("10.1.0.5"), 0) is False  # O_EXCL
    # the reservation's bytes, then (after the hint's rename) one sync of both names
    assert events == ["fsync file 10.1.0.5", "rename last_reserved_ip.0", "fsync dir net"]
    directory = tmp_path / "net"
    assert (directory / "10.1.0.5").read_bytes() == b"cid\r\neth0"  # the reference's layout
    assert stat.S_IMODE((directory / "10.1.0.5").stat().st_mode) == 0o600
    assert (directory / "last_reserved_ip.0").read_bytes() == b"10.1.0.5"
    assert sorted(p.name for p in directory.iterdir()) == ["10.1.0.5", "last_reserved_ip.0", "lock"]


def test_the_result_cache_is_fsynced_with_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record(monkeypatch)
    result = Result.from_dict({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]})
    rt = RuntimeConf(container_id="cid", netns="/run/netns/x", ifname="eth0")
    cache.write_cache(str(tmp_path), result, b"{}", "net", rt)
    assert events[1:] == ["rename net-cid-eth0", "fsync dir results"]
    assert events[0].startswith("fsync file ")


def test_dhcp_leases_are_fsynced_with_their_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record(monkeypatch)
    LeaseStore(tmp_path / "leases").save({"clientID": "c1", "ip": "10.1.0.9"})
    assert events[-1] == "fsync dir leases" and events[-2].startswith("rename ")
    assert LeaseStore(tmp_path / "leases").load_all()[0]["clientID"] == "c1"


def test_corrupt_cache_files_are_skipped_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    result = Result.from_dict({"cniVersion": "1.0.0"})
    good = RuntimeConf(container_id="good", netns="/run/netns/x", ifname="eth0")
    cache.write_cache(str(tmp_path), result, b"{}", "net", good)
    results = tmp_path / "results"
    real = (results / "net-good-eth0").read_bytes()
    bad = {
        "net-trunc-eth0": real[:20],
        "net-garbage-eth0": b"\xff\x00{{",
        "net-types-eth0": b'{"kind":"cniCacheV1","containerId":1,"ifName":"eth0"}',
        "net-result-eth0": b'{"kind":"cniCacheV1","containerId":"c","ifName":"e",'
        b'"networkName":"net","result":[1]}',
        "net-deep-eth0": b"[" * 50000,
    }
    for name, data in bad.items():
        (results / name).write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="pycni.runtime.cache"):
        found = cache.list_attachments(str(tmp_path))
    assert [a.container_id for a in found] == ["good"]
    for name in bad:
        assert any(name in record.getMessage() for record in caplog.records), name
    for name in bad:
        with pytest.raises(ValueError):
            cache.read_entry(str(results / name))
