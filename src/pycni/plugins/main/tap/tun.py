"""tap devices through /dev/net/tun ioctls, created in the calling thread's namespace.

The kernel puts a tun/tap device in the network namespace that opened /dev/net/tun, so the
caller enters the pod namespace first. The device is made persistent (it outlives our file
descriptor) and is later removed like any link, by rtnetlink.

The reference plugin makes its taps two ways, and the flags differ between them; we keep both
flag sets so a tap looks the same to its user (e.g. a VMM that expects a vnet header):
* owner and group both given: ``IFF_TAP | IFF_VNET_HDR`` (packet info on), as its netlink path;
* otherwise: ``IFF_TAP | IFF_NO_PI`` (no vnet header), as its ``ip tuntap add`` path.
``multiQueue`` adds ``IFF_MULTI_QUEUE | IFF_NO_PI`` in both cases.
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys

from pycni.net.errors import NetError

TUN_DEVICE = "/dev/net/tun"

IFF_TAP = 0x0002
IFF_MULTI_QUEUE = 0x0100
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000

TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
TUNSETOWNER = 0x400454CC
TUNSETGROUP = 0x400454CE

_IFREQ = "16sH22x"  # struct ifreq: name, flags, padding to 40 bytes


class TunError(NetError, OSError):
    """A tun ioctl failed (the message names which one)."""


def tap_flags(multi_queue: bool, owner: int | None, group: int | None) -> int:
    """The TUNSETIFF flags the reference ends up with for this configuration."""
    if owner is not None and group is not None:
        flags = IFF_TAP | IFF_VNET_HDR
    else:
        flags = IFF_TAP | IFF_NO_PI
    if multi_queue:
        flags |= IFF_MULTI_QUEUE | IFF_NO_PI
    return flags


def create_tap(name: str, flags: int, owner: int | None = None, group: int | None = None) -> None:
    """Create the persistent tap ``name`` in the current namespace; raise TunError on failure."""
    try:
        fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise TunError(exc.errno, f"open {TUN_DEVICE}: {exc.strerror}") from None
    try:
        _ioctl(fd, TUNSETIFF, struct.pack(_IFREQ, name.encode(), flags), "TUNSETIFF")
        if owner is not None:
            _ioctl(fd, TUNSETOWNER, owner, "TUNSETOWNER")
        if group is not None:
            _ioctl(fd, TUNSETGROUP, group, "TUNSETGROUP")
        _ioctl(fd, TUNSETPERSIST, 1, "TUNSETPERSIST")
    finally:
        os.close(fd)


def _ioctl(fd: int, request: int, arg: bytes | int, what: str) -> None:
    try:
        fcntl.ioctl(fd, request, arg)
    except OSError as exc:
        raise TunError(exc.errno, f"{what}: {exc.strerror}") from None


def helper_argv(
    python: str, name: str, flags: int, owner: int | None, group: int | None
) -> list[str]:
    """The command line that makes the tap in a process of its own (this module's helper,
    stdlib only: ``-I -S`` and this pycni's directory), for a tap made under an exec label."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["pycni"].__file__ or "")))
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        f"from {__name__} import _helper_main; sys.exit(_helper_main(sys.argv[1:]))"
    )
    ids = ["" if owner is None else str(owner), "" if group is None else str(group)]
    return [python, "-I", "-S", "-c", code, name, str(flags), *ids]


def _helper_main(args: list[str]) -> int:
    """``NAME FLAGS OWNER GROUP`` (empty OWNER/GROUP: not set): create the tap, exit 0."""
    try:
        name, flags, owner, group = args
        create_tap(name, int(flags), int(owner) if owner else None, int(group) if group else None)
    except (ValueError, TunError) as exc:
        sys.stderr.write(f"failed to create tap {args[:1]}: {exc}\n")
        return 1
    return 0
