"""One NETLINK_NETFILTER socket per network namespace, and request/reply on it for any
nfnetlink subsystem (nf_tables for netfilter/nftnl.py,
conntrack for netfilter/conntrack.py).

The socket stays open: closing one costs an RCU grace period in the kernel, more than a
request itself (docs/benchmarks.md). It binds to the namespace of the thread that opened it,
so sockets are kept per namespace (keyed by the namespace inode, the last 16 used).
"""

from __future__ import annotations

import _socket as socket  # the C module: socket.py builds its enums at import (benchmarks.md)
import _thread  # threading.Lock is _thread.allocate_lock; threading costs an import
import contextlib
import errno
import os
import struct
from collections import OrderedDict

from pycni.net.errors import NetError
from pycni.net.netlink.kernel import NetlinkError
from pycni.net.netlink.rtnl.wire import (
    NLM_F_ACK as NLM_F_ACK,
)
from pycni.net.netlink.rtnl.wire import (
    NLM_F_CREATE as NLM_F_CREATE,
)
from pycni.net.netlink.rtnl.wire import (
    NLM_F_DUMP as NLM_F_DUMP,
)
from pycni.net.netlink.rtnl.wire import (
    NLM_F_EXCL as NLM_F_EXCL,
)
from pycni.net.netlink.rtnl.wire import (
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    messages,
)
from pycni.net.ns import THREAD_NETNS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

NETLINK_NETFILTER = 12
NFGENMSG = struct.Struct("=BBH")  # family, version, resource id (big-endian)
RECV_SIZE = 1 << 17
_TIMEOUT = 30.0  # seconds; the kernel answers at once, this only bounds a lost reply


class NfnetlinkError(NetError, OSError):
    """The kernel refused a request; ``errno`` is its error."""


def replies(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """wire.messages, its one failure (a truncated message) as this module's error."""
    try:
        yield from messages(data)
    except NetlinkError:
        raise NfnetlinkError("netlink: truncated message") from None


class Connection:
    """The namespace's socket, its lock and its sequence numbers."""

    def __init__(self) -> None:
        self.sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_NETFILTER
        )
        self.sock.settimeout(_TIMEOUT)
        self.lock = _thread.allocate_lock()
        self.seq = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


_MAX_CONNS = 16
_conns: OrderedDict[tuple[int, int], Connection] = OrderedDict()
_conns_lock = _thread.allocate_lock()


def connection() -> Connection:
    """The calling thread's namespace's socket (opened on first use)."""
    st = os.stat(THREAD_NETNS)
    key = (st.st_dev, st.st_ino)
    with _conns_lock:
        conn = _conns.get(key)
        if conn is None:
            conn = _conns[key] = Connection()
            while len(_conns) > _MAX_CONNS:
                _conns.popitem(last=False)[1].close()
        else:
            _conns.move_to_end(key)
        return conn


def request(subsystem: int, kind: int, flags: int, body: bytes) -> list[tuple[int, bytes]] | None:
    """Send one request of ``subsystem``; the (message type, attributes bytes) replies until
    the end of the dump or the ack. None when the kernel answers ENOENT."""
    conn = connection()
    with conn.lock:
        conn.seq = seq = (conn.seq + 1) & 0xFFFFFFFF
        msg_type = (subsystem << 8) | kind
        header = NLMSGHDR.pack(NLMSGHDR.size + len(body), msg_type, NLM_F_REQUEST | flags, seq, 0)
        conn.sock.sendto(header + body, (0, 0))
        out: list[tuple[int, bytes]] = []
        while True:
            for mtype, mseq, payload in replies(conn.sock.recv(RECV_SIZE)):
                if mseq != seq:
                    continue  # the tail of an earlier, interrupted request
                if mtype == NLMSG_DONE:
                    return out
                if mtype == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", payload, 0)
                    if code == 0:
                        return out
                    if -code == errno.ENOENT:
                        return None
                    raise NfnetlinkError(-code, os.strerror(-code))
                out.append((mtype & 0xFF, payload[NFGENMSG.size :]))
