"""write_atomic: the one way state files are written (mode, replace, nothing left on failure)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pycni import fsutil
from pycni.fsutil import create_exclusive, fsync_dir, write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_bytes_and_str_with_the_mode_asked_for(tmp_path: Path) -> None:
    write_atomic(tmp_path / "a", b"\x00bytes", mode=0o600)
    write_atomic(tmp_path / "b", "text é", mode=0o644)
    assert (tmp_path / "a").read_bytes() == b"\x00bytes"
    assert (tmp_path / "b").read_text(encoding="utf-8") == "text é"
    assert _mode(tmp_path / "a") == 0o600
    assert _mode(tmp_path / "b") == 0o644


def test_creates_the_directory_with_dir_mode(tmp_path: Path) -> None:
    target = tmp_path / "state" / "file"
    write_atomic(target, b"x", dir_mode=0o700, fsync=False)
    assert _mode(tmp_path / "state") == 0o700
    assert target.read_bytes() == b"x"


def test_make_dirs_false_does_not_create_the_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "file", b"x", make_dirs=False)
    assert not (tmp_path / "missing").exists()


def test_replaces_the_old_file_as_a_new_inode(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old contents that are longer")
    os.chmod(target, 0o666)
    reader = target.open("rb")  # a reader that opened the old file keeps the old bytes
    try:
        write_atomic(target, b"new", mode=0o600)
        assert reader.read() == b"old contents that are longer"
    finally:
        reader.close()
    assert target.read_bytes() == b"new"
    assert _mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_failure_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_atomic(target, b"new", prefix=".tmp-")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_failure_while_writing_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "f", 42, prefix=".mine-")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_temp_file_uses_the_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append(os.path.basename(src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_atomic(tmp_path / "f", b"x", prefix=".pycni-tmp-")
    assert len(seen) == 1 and seen[0].startswith(".pycni-tmp-")


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each os.fsync call synced: "dir" or "file", in order (with the renames)."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_fsync_syncs_the_file_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record_fsyncs(monkeypatch)
    write_atomic(tmp_path / "f", b"x")
    assert events == ["file", "rename", "dir"]
    events.clear()
    write_atomic(tmp_path / "g", b"x", fsync=False)
    assert events == ["rename"]


def test_create_exclusive_creates_once_with_the_bytes_and_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record_fsyncs(monkeypatch)
    target = tmp_path / "10.0.0.2"
    assert create_exclusive(target, b"cid\r\neth0", mode=0o600) is True
    assert events == ["file"]
    assert target.read_bytes() == b"cid\r\neth0"
    assert _mode(target) == 0o600
    assert create_exclusive(target, b"other\r\neth0") is False
    assert target.read_bytes() == b"cid\r\neth0"
    fsync_dir(tmp_path)
    assert events == ["file", "dir"]


def test_create_exclusive_removes_the_file_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_write(fd: int, data: object) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(os, "write", broken_write)
    with pytest.raises(OSError, match="disk full"):
        create_exclusive(tmp_path / "f", b"data")
    assert list(tmp_path.iterdir()) == []


def _chain(tmp_path: Path) -> Path:
    base = tmp_path / "rt"
    (base / "a" / "b").mkdir(parents=True)
    return base


def test_open_dir_nofollow_opens_a_trusted_chain_and_creates_missing_parts(
    tmp_path: Path,
) -> None:
    base = _chain(tmp_path)
    fd = fsutil.open_dir_nofollow(str(base), ("a", "b"))
    assert fd is not None
    try:
        assert os.fstat(fd).st_ino == (base / "a" / "b").stat().st_ino
    finally:
        os.close(fd)
    assert fsutil.open_dir_nofollow(str(base), ("a", "missing")) is None
    fd = fsutil.open_dir_nofollow(str(base), ("a", "new", "deeper"), create=True)
    assert fd is not None
    os.close(fd)
    assert (base / "a" / "new").stat().st_mode & 0o777 == 0o700


def test_open_dir_nofollow_never_follows_a_symlink_below_the_root(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (base / "a" / "link").symlink_to(target)
    with pytest.raises(fsutil.UnsafePathError, match="is a symlink"):
        fsutil.open_dir_nofollow(str(base), ("a", "link"), create=True)
    assert list(target.iterdir()) == []


def test_open_dir_nofollow_follows_only_trusted_symlinks_in_the_root(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    (tmp_path / "alias").symlink_to(base)  # root's own, as /var/run -> /run
    fd = fsutil.open_dir_nofollow(str(tmp_path / "alias"), ("a",))
    assert fd is not None
    os.close(fd)
    os.lchown(tmp_path / "alias", 65534, 65534)  # made by someone else
    with pytest.raises(fsutil.UnsafePathError, match="owned by uid 65534"):
        fsutil.open_dir_nofollow(str(tmp_path / "alias"), ("a",), uids=frozenset({0}))


def test_open_dir_nofollow_refuses_directories_others_control(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    os.chown(base / "a", 65534, 65534)
    with pytest.raises(fsutil.UnsafePathError, match=r"a is owned by uid 65534, not uid 0"):
        fsutil.open_dir_nofollow(str(base), ("a", "b"), uids=frozenset({0}))
    os.chown(base / "a", 0, 0)
    (base / "a").chmod(0o777)
    with pytest.raises(fsutil.UnsafePathError, match="writable by group or others"):
        fsutil.open_dir_nofollow(str(base), ("a", "b"), uids=frozenset({0}))
    (base / "a").chmod(0o1777)  # sticky, as /tmp: others cannot replace root's entries
    fd = fsutil.open_dir_nofollow(str(base), ("a", "b"), uids=frozenset({0}))
    assert fd is not None
    os.close(fd)


def test_remove_tree_nofollow_keeps_what_symlinks_point_at(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    target = tmp_path / "precious"
    (target / "net").mkdir(parents=True)
    (target / "net" / "file").write_text("keep")
    (base / "a" / "via").symlink_to(target)  # a symlinked parent
    (base / "a" / "b" / "net").symlink_to(target / "net")  # a symlinked tree
    with pytest.raises(fsutil.UnsafePathError, match="via is a symlink"):
        fsutil.remove_tree_nofollow(str(base), ("a", "via"), "net")
    with pytest.raises(fsutil.UnsafePathError, match="is not a directory: kept"):
        fsutil.remove_tree_nofollow(str(base), ("a", "b"), "net")
    assert (target / "net" / "file").read_text() == "keep"
    (base / "a" / "b" / "net").unlink()
    (base / "a" / "b" / "net" / "x").mkdir(parents=True)
    fsutil.remove_tree_nofollow(str(base), ("a", "b"), "net")
    assert not (base / "a" / "b" / "net").exists()
    fsutil.remove_tree_nofollow(str(base), ("a", "b"), "net")  # missing is fine
