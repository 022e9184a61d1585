"""sysctls through /proc/sys. Entries under net/ are per network namespace and resolve to the
namespace of the thread that opens them, so a thread inside a namespace can set its values."""

from __future__ import annotations

import os


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


def enable_forwarding(version: int) -> None:
    """ip_forward for IPv4, conf/all/forwarding for IPv6 (pkg/ip's EnableIP4/6Forward)."""
    if version == 4:
        ensure("net/ipv4/ip_forward", "1")
    else:
        ensure("net/ipv6/conf/all/forwarding", "1")
