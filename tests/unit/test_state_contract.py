"""FakeStateFiles answers every case of tests/state_contract.py as the disk does (rootless:
the disk side works in a temporary directory), and keeps what a crash keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from pycni.state.disk import DISK
from pycni.state.fake_files import FakeStateFiles
from tests.state_contract import CASES, Case

ROOT = "/var/lib/cni/fake-root"


@pytest.mark.parametrize("name", sorted(CASES))
def test_fake_answers_as_the_disk(name: str, tmp_path: Path) -> None:
    run: Case = CASES[name]
    root = str(tmp_path / "root")
    Path(root).mkdir(mode=0o700)
    on_disk = run(DISK, root)
    fake = FakeStateFiles()
    fake.make_dirs(ROOT, mode=0o700)
    in_memory = run(fake, ROOT)
    assert repr(in_memory).replace(ROOT, "ROOT") == repr(on_disk).replace(root, "ROOT")


def test_a_crash_keeps_only_what_was_made_durable() -> None:
    fake = FakeStateFiles()
    fake.make_dirs("/s", mode=0o755)
    fake.create_exclusive("/s/synced", b"owner")  # bytes fsynced, name synced below
    fake.create_exclusive("/s/bytes-only", b"x", durable=False)  # name synced, bytes not
    fake.sync_dir("/s")
    fake.create_exclusive("/s/name-unsynced", b"y")  # bytes fsynced, name never synced
    fake.write_atomic("/s/atomic", b"z")  # durable: file and directory fsynced
    fake.write_atomic("/s/lazy", b"w", durable=False)
    fake.crash()
    assert fake.tree("/s") == {
        "/s/atomic": (b"z", 0o600),
        "/s/bytes-only": (b"", 0o600),
        "/s/synced": (b"owner", 0o600),
    }


def test_a_removal_is_undone_by_a_crash_until_the_directory_is_synced() -> None:
    fake = FakeStateFiles()
    fake.make_dirs("/s", mode=0o755)
    fake.write_atomic("/s/a", b"1")
    fake.remove("/s/a")
    fake.crash()
    assert fake.read("/s/a") == b"1"
    fake.remove("/s/a")
    fake.sync_dir("/s")
    fake.crash()
    assert fake.tree("/s") == {}


def test_a_lock_taken_twice_is_an_error_not_a_hang() -> None:
    fake = FakeStateFiles()
    fake.make_dirs("/s", mode=0o755)
    one, two = fake.open_lock("/s/lock"), fake.open_lock("/s/lock")
    one.acquire()
    with pytest.raises(AssertionError, match="flock taken twice"):
        two.acquire()
    one.close()
    two.acquire()
