"""sysctls through /proc/sys. Entries under net/ are per network namespace and resolve to the
namespace of the thread that opens them, so a thread inside a namespace can set its values."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pycni.net.kernel import Kernel


def path_of(name: str) -> str:
    """``net.ipv4.ip_forward`` or ``net/ipv4/conf/eth0.100/x`` → the file under /proc/sys.

    When a dot appears before the first slash the name is in dotted form: dots become
    slashes and slashes dots (so interface names with dots survive), as pkg/utils/sysctl.
    """
    slash = name.find("/")
    dot = name.find(".")
    if dot != -1 and (slash == -1 or dot < slash):
        name = name.translate(str.maketrans("./", "/."))
    return "/proc/sys/" + name


def read(name: str) -> str:
    with open(path_of(name), "rb") as fh:
        data = fh.read()
    return data[:-1].decode() if data.endswith(b"\n") else data.decode()


def write(name: str, value: str) -> None:
    fd = os.open(path_of(name), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def try_write(name: str, value: str) -> None:
    """Best effort (e.g. an IPv6 knob on a node with IPv6 disabled), as the reference."""
    try:
        write(name, value)
    except OSError:
        return


def ensure(name: str, value: str) -> None:
    """Write only when the value differs (forwarding: avoid needless writes)."""
    if read(name) != value:
        write(name, value)


def enable_forwarding(version: int, kernel: Kernel | None = None) -> None:
    """ip_forward for IPv4, conf/all/forwarding for IPv6 (pkg/ip's EnableIP4/6Forward).

    The current value is read over netlink (RTM_GETNETCONF, with ``kernel`` if given, a client
    of this thread's namespace): opening /proc/sys/net/ipv4/* walks past an entry per
    namespace that ever looked at it (docs/benchmarks.md). Only a needed write, or a kernel
    that does not answer, goes through /proc/sys."""
    from pycni.net.kernel import NetlinkError, family_of
    from pycni.net.netlink import rtnl

    name = "net/ipv4/ip_forward" if version == 4 else "net/ipv6/conf/all/forwarding"
    try:
        if kernel is not None:
            current = kernel.forwarding(family_of(version))
        else:
            with rtnl() as own:
                current = own.forwarding(family_of(version))
    except NetlinkError:
        current = None  # e.g. IPv6 off: the /proc/sys path answers as it always did
    if current != 1:
        ensure(name, "1")
