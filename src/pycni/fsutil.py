"""Small file-system helpers shared by the runtime, the plugins and the cluster tools."""

from __future__ import annotations

import os


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int = 0o600,
    dir_mode: int = 0o700,
    fsync: bool = True,
    make_dirs: bool = True,
    prefix: str = ".tmp-",
) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old file or the new one, never half.

    State files (result cache, tuning backups, flannel's subnet.env, lease records) are read by
    another process or by the next CNI call, possibly after a crash, so nothing is written in
    place: the bytes go to a temporary file in the same directory (``prefix`` lets directory
    scanners skip it), get ``mode`` and are renamed over ``path``.  With ``fsync`` the file is
    fsynced before the rename and the directory after it, so once this returns the new file
    survives a power cut (a rename alone is atomic against a kill, not against a crash of the
    machine).  On any failure the temporary file is removed and the old file stays as it was.
    ``make_dirs`` creates a missing parent directory, the last level with ``dir_mode``.
    ``str`` is UTF-8.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    if make_dirs:
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = _make_temp(directory, prefix)
    try:
        # os-level writes and fchmod rather than os.fdopen and chmod(path): a file object
        # costs fstat, ioctl and lseek, and chmod a path lookup (5 syscalls less per call)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        import contextlib  # not at the top: write_atomic's callers are one-shot

        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(directory)


def _make_temp(directory: str, prefix: str) -> tuple[int, str]:
    """``tempfile.mkstemp`` (a new 0600 file, O_EXCL, no symlink followed), without importing
    tempfile: it loads shutil, bz2, lzma and random, a cost every plugin call would pay."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = os.path.join(directory, prefix + os.urandom(6).hex())
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary file name in {directory}")


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (a create, rename or unlink done in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_exclusive(
    path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600, fsync: bool = True
) -> bool:
    """Create ``path`` holding ``data`` only if it does not exist yet; False when it does.

    The create is O_EXCL (so two writers never both own the name, as host-local's reference
    store requires); the bytes are written and, with ``fsync``, the file is fsynced.  The
    caller fsyncs the directory (``fsync_dir``) once it has made all its entries, so one
    operation that creates several files pays for one directory sync.  A failed write removes
    the file again.
    """
    target = os.fspath(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        import contextlib  # not at the top: write_atomic's callers are one-shot

        with contextlib.suppress(OSError):
            os.unlink(target)
        raise
    os.close(fd)
    return True


class UnsafePathError(OSError):
    """A path a root process must not use: a directory others control, or a symlink it did
    not create. The message names the component and what is wrong with it."""


DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's own limit on symlinks in one lookup


def trusted_uids() -> frozenset[int]:
    """Who may own the directories a path runs through: root, and a non-root caller itself."""
    euid = os.geteuid()
    return frozenset({0, euid})


def _check_dir(fd: int, where: str, uids: frozenset[int]) -> None:
    st = os.fstat(fd)
    if st.st_uid not in uids:
        owners = " or ".join(f"uid {u}" for u in sorted(uids))
        raise UnsafePathError(f"{where} is owned by uid {st.st_uid}, not {owners}")
    if st.st_mode & 0o022 and not st.st_mode & 0o1000:  # others could swap its entries
        raise UnsafePathError(
            f"{where} is writable by group or others (mode {st.st_mode & 0o7777:04o})"
        )


def open_dir_nofollow(
    root: str,
    tail: tuple[str, ...] | list[str] = (),
    *,
    uids: frozenset[int] | None = None,
    create: bool = False,
    mode: int = 0o700,
) -> int | None:
    """Open the directory ``root/tail…`` component by component from ``/``, without following
    any symlink an untrusted user could have made; returns its fd, or None when a component is
    missing and ``create`` is false.

    Every directory passed through must be owned by a uid in ``uids`` (default
    ``trusted_uids()``: root, plus the caller when it is not root) and not be writable by group
    or others unless sticky, so nobody else can rename, replace or add entries along the way
    once it is checked. Within ``root`` (a path from the environment, such as
    XDG_RUNTIME_DIR, where ``/var/run -> /run`` is common) a symlink is followed only when a
    trusted uid owns it: it then sits in a checked directory, made by a trusted user. The
    ``tail`` components (which the caller names itself) are never followed through a symlink.
    With ``create``, missing components are made with ``mode`` (as Go's MkdirAll). Raises
    UnsafePathError.
    """
    trusted = trusted_uids() if uids is None else uids
    parts = [(p, True) for p in os.path.normpath(root).split("/") if p]
    parts += [(p, False) for p in tail]
    fd = os.open("/", DIR_NOFOLLOW)
    where = "/"
    links = 0
    try:
        _check_dir(fd, where, trusted)
        while parts:
            name, follow = parts.pop(0)
            if name in ("", "."):
                continue
            if "/" in name or (name == ".." and not follow):
                raise UnsafePathError(f"{name!r} is not a single path component")
            try:
                nfd = os.open(name, DIR_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                import contextlib  # not at the top: write_atomic's callers are one-shot

                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                parts.insert(0, (name, follow))
                continue
            except OSError as exc:  # ELOOP: a symlink; ENOTDIR: not a directory
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                path = os.path.join(where, name)
                if not (_is_link(st.st_mode) and follow and st.st_uid in trusted):
                    what = "a symlink" if _is_link(st.st_mode) else "not a directory"
                    raise UnsafePathError(
                        f"{path} is {what} (owned by uid {st.st_uid}): not followed"
                    ) from exc
                links += 1
                if links > _MAX_LINKS:
                    raise UnsafePathError(f"too many symlinks resolving {root}") from exc
                target = os.readlink(name, dir_fd=fd)
                parts[:0] = [(p, True) for p in target.split("/") if p]
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", DIR_NOFOLLOW)
                    where = "/"
                continue
            os.close(fd)
            fd = nfd
            where = os.path.normpath(os.path.join(where, name))
            _check_dir(fd, where, trusted)
    except BaseException:
        import contextlib  # not at the top: write_atomic's callers are one-shot

        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return fd


def _is_link(mode: int) -> bool:
    return mode & 0o170000 == 0o120000


def remove_tree_nofollow(
    root: str, tail: tuple[str, ...] | list[str], name: str, *, uids: frozenset[int] | None = None
) -> None:
    """Remove ``root/tail…/name`` and everything under it through directory fds: the parent
    is opened as ``open_dir_nofollow`` does, and a symlink named ``name`` (or met anywhere
    below) is never followed (shutil.rmtree with ``dir_fd``). Missing is fine."""
    import shutil  # not on the cold path of a plugin call: only a network's last DEL removes

    parent = open_dir_nofollow(root, tail, uids=uids)
    if parent is None:
        return
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        os.close(parent)
        return
    try:
        if st.st_mode & 0o170000 != 0o040000:  # a symlink, or not a directory
            raise UnsafePathError(f"{os.path.join(root, *tail, name)} is not a directory: kept")
        shutil.rmtree(name, dir_fd=parent)
    finally:
        os.close(parent)
