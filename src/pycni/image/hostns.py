"""The daemon container's way onto the host: join the host's mount namespace, then exec.

The daemon serves only callers in its own mount namespace (pycni.daemon.peer): a call's
CNI_PATH, netns and dataDir are paths, and must name the caller's files. The entry points
on the host are exec'd by the runtime in the host's mount namespace, so the daemon runs
there too: with hostPID the host's init is pid 1, and ``setns`` into its mount namespace
(CAP_SYS_ADMIN, CAP_SYS_CHROOT; CAP_SYS_PTRACE to open another root process's namespace)
puts this process on the host's files, where install-cni copied the same runtime. The
container keeps its network (the host's: hostNetwork) and pid namespace.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct

from pycni.image.layout import IMAGE_RUNTIME, release_of

CLONE_NEWNS = 0x00020000
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)


class HostError(Exception):
    """The host's mount namespace or runtime is not usable."""


def serving_mount_ns(socket_path: str) -> int:
    """A pidfd of the process serving ``socket_path`` (the daemon), to ``setns`` into its
    mount namespace.

    For the liveness probe, which runs in the container's mount namespace (where the daemon
    answers only "run it yourself"). Opening pid 1's namespace from a process exec'd into the
    container was refused (EACCES) in our runs; entering the daemon's, a process with the
    same capabilities, is not. The peer comes as a pidfd (SO_PEERPIDFD; else pidfd_open of
    SO_PEERCRED's pid), so no pid number is looked up in a /proc that may be of another pid
    namespace, and a reused pid lends nothing.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        try:
            conn.connect(socket_path)
        except OSError as exc:
            raise HostError(f"no daemon on {socket_path}: {exc.strerror or exc}") from None
        try:
            fd: int = struct.unpack("i", conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4))[0]
            return fd
        except OSError:
            pass
        try:
            pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            return os.pidfd_open(pid[0])
        except OSError as exc:
            raise HostError(f"the daemon on {socket_path} is not visible: {exc}") from None


def enter_mount_ns(where: str | int) -> None:
    """``setns`` into the mount namespace at path ``where``, or of the namespace or pidfd
    ``where`` (closed after); the process must be single-threaded."""
    if isinstance(where, int):
        fd = where
    else:
        try:
            fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise HostError(
                f"cannot open the host's mount namespace {where}: {exc.strerror} "
                "(the pod needs hostPID and CAP_SYS_PTRACE)"
            ) from None
    try:
        setns = getattr(os, "setns", None)  # Python 3.12+
        if setns is not None:
            setns(fd, CLONE_NEWNS)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNS) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
    except OSError as exc:
        raise HostError(
            f"cannot enter the host's mount namespace: {exc.strerror} "
            "(the container needs CAP_SYS_ADMIN and CAP_SYS_CHROOT)"
        ) from None
    finally:
        os.close(fd)
    os.chdir("/")


def exec_on_host(mount_ns: str | int, argv: list[str], runtime: str = IMAGE_RUNTIME) -> None:
    """Enter the host's mount namespace and exec ``runtime``'s ``argv[0]`` there.

    Refused unless the host holds the image's own release (install-cni ran from this image):
    another release's daemon would not be the one this pod was rolled out with.
    """
    try:
        ours = release_of(runtime)
    except (OSError, ValueError) as exc:
        raise HostError(f"the image's runtime is unusable: {exc}") from None
    enter_mount_ns(mount_ns)
    try:
        theirs = release_of(runtime)
    except (OSError, ValueError) as exc:
        raise HostError(f"no pycni runtime on the host ({exc}): run install-cni first") from None
    if theirs != ours:
        raise HostError(f"the host's {runtime} is release {theirs}, this image's is {ours}")
    program = os.path.join(runtime, "venv/bin", argv[0])
    os.execv(program, [program, *argv[1:]])
