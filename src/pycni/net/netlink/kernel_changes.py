"""Has the kernel changed an address or a route that is not ours since we last asked?

The cluster agent checks each lease from a watch event against facts about the node (its
underlay prefixes, the routes that are not the agent's) read at its last full pass.
Reading them again for every event costs a route dump each time; instead one netlink socket,
subscribed to address and route changes of the namespace it was opened in, says whether
any of them changed since the last look. Our own routes (routing protocol ``proto``)
change all the time and are not counted; a lost notification (the socket's buffer ran
over) counts as a change.
"""

from __future__ import annotations

import contextlib
import errno
import socket

from pycni.net.netlink.rtnl.wire import NETLINK_ROUTE, NLMSGHDR, align

RTMGRP_IPV4_IFADDR, RTMGRP_IPV4_ROUTE = 0x10, 0x40
RTMGRP_IPV6_IFADDR, RTMGRP_IPV6_ROUTE = 0x100, 0x400
RTM_NEWADDR, RTM_DELADDR, RTM_NEWROUTE, RTM_DELROUTE = 20, 21, 24, 25
RTMSG_PROTOCOL = 5  # offset of rtm_protocol in struct rtmsg


class KernelChanges:
    """Address and route changes in the namespace of the thread that opened it."""

    def __init__(self, proto: int) -> None:
        self.proto = proto
        self.sock = socket.socket(
            socket.AF_NETLINK,
            socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
            NETLINK_ROUTE,
        )
        groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
        self.sock.bind((0, groups))

    def close(self) -> None:
        self.sock.close()

    def changed(self) -> bool:
        """Whether an address or a route not marked ``proto`` changed since the last call
        (reads every pending notification)."""
        changed = False
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return changed
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                changed = True  # notifications were lost: assume the worst
                continue
            if not changed:
                changed = self._relevant(data)

    def _relevant(self, data: bytes) -> bool:
        offset = 0
        while offset + NLMSGHDR.size <= len(data):
            length, kind = NLMSGHDR.unpack_from(data, offset)[:2]
            if length < NLMSGHDR.size:
                return True  # cannot be read: assume a change
            if kind in (RTM_NEWADDR, RTM_DELADDR):
                return True
            if kind in (RTM_NEWROUTE, RTM_DELROUTE):
                at = offset + NLMSGHDR.size + RTMSG_PROTOCOL
                if at >= offset + length or data[at] != self.proto:
                    return True
            offset += align(length)
        return False

    def __enter__(self) -> KernelChanges:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.close()
