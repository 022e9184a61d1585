"""Netlink dumps interrupted by concurrent changes (NLM_F_DUMP_INTR), provoked for real.

A dump of links or addresses spans several reads; when the kernel's objects change between
two of them, it flags the replies NLM_F_DUMP_INTR (the listing may miss or repeat objects).
The native client reads such a dump again, up to DUMP_TRIES times, then fails saying so. Here
the change is made by another thread (another socket) or another process, at a chosen read
of the dump, so each test sees the kernel flag it every time; the last test lets a thread
churn freely, as on a busy node.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

import pytest

from pycni.net.netlink.kernel import NetlinkError
from pycni.net.netlink.rtnl import codec
from pycni.net.netlink.rtnl.native import NativeKernel
from pycni.net.netlink.rtnl.wire import (
    DUMP_TRIES,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    Socket,
)
from tests import harness

pytestmark = pytest.mark.kernel

LINKS = 40  # enough links for a dump over several reads (a link message is ~1.5 KB)
ADDRESSES = 1000  # and addresses (~70 bytes each)


class ChangingSocket(Socket):
    """A socket whose owner changes the kernel's objects (``change``) right after the
    first read of each of the first ``times`` dumps it sends: a real concurrent change,
    made where it is sure to land inside the dump."""

    def __init__(self, change: Callable[[], None], times: int) -> None:
        super().__init__()
        self.change, self.times, self.reads_this_dump, self.changes = change, times, 0, 0

    def _exchange(self, kind: int, flags: int, body: bytes) -> tuple[list[tuple[int, bytes]], bool]:
        self.reads_this_dump = 0
        return super()._exchange(kind, flags, body)

    def _recv(self) -> bytes:
        data = super()._recv()
        self.reads_this_dump += 1
        if self.reads_this_dump == 1 and self.changes < self.times:
            self.changes += 1
            self.change()
        return data


@pytest.fixture
def busy(node: harness.Namespace) -> harness.Namespace:
    """A node with LINKS veth links and ADDRESSES addresses."""
    lines = [f"link add v{i} type veth peer name w{i}" for i in range(LINKS // 2)]
    lines += [f"addr add 10.50.{i // 250}.{i % 250 + 1}/32 dev v0" for i in range(ADDRESSES)]
    node.run("ip", "-batch", "-", input=("\n".join(lines) + "\n").encode())
    return node


def _in_thread(node: harness.Namespace, action: Callable[[], None]) -> Callable[[], None]:
    """``action`` run by another thread inside ``node`` (joined before returning)."""

    def run() -> None:
        def target() -> None:
            with node.entered():
                action()

        worker = threading.Thread(target=target)
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive()

    return run


def _link_names(sock: Socket) -> list[str]:
    replies = sock.request(codec.RTM_GETLINK, NLM_F_DUMP, codec.ifinfo() + codec.EXT_MASK)
    return [codec.decode_link(p).name for t, p in replies if t == codec.RTM_NEWLINK]


def test_a_link_dump_interrupted_by_another_thread_is_read_again(busy: harness.Namespace) -> None:
    counter = iter(range(100))

    def add_link() -> None:
        other = Socket()  # this thread's own socket, as another client's
        try:
            body = codec.new_link("bridge", f"br{next(counter)}")
            other.request(codec.RTM_NEWLINK, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, body)
        finally:
            other.close()

    with busy.entered():
        sock = ChangingSocket(_in_thread(busy, add_link), times=1)
        names = _link_names(sock)
    assert sock.interrupted_dumps == 1  # the kernel flagged the first read; the second was clean
    assert len(names) == len(set(names))  # nothing listed twice
    assert {f"v{i}" for i in range(LINKS // 2)} | {"br0"} <= set(names)  # nothing missed


def test_an_address_dump_interrupted_by_another_process_is_read_again(
    busy: harness.Namespace,
) -> None:
    def add_address() -> None:
        busy.run("ip", "addr", "add", "10.51.0.1/32", "dev", "w0")

    with busy.entered():
        sock = ChangingSocket(add_address, times=1)
        replies = sock.request(codec.RTM_GETADDR, NLM_F_DUMP, codec.dump_addresses(0, 2))
    found = [codec.decode_address(p) for t, p in replies if t == codec.RTM_NEWADDR]
    addresses = [str(a.interface) for a in found if a is not None]
    assert sock.interrupted_dumps == 1
    assert len(addresses) == len(set(addresses))
    assert "10.51.0.1/32" in addresses and "10.50.1.50/32" in addresses
    assert len(addresses) == ADDRESSES + 1 + 1  # ours, the one added meanwhile, 127.0.0.1


def test_a_dump_interrupted_every_time_fails_saying_so(busy: harness.Namespace) -> None:
    counter = iter(range(100))

    def add_address() -> None:
        busy.run("ip", "addr", "add", f"10.52.0.{next(counter) + 1}/32", "dev", "w0")

    with busy.entered():
        sock = ChangingSocket(add_address, times=DUMP_TRIES)
        with pytest.raises(NetlinkError) as info:
            sock.request(codec.RTM_GETADDR, NLM_F_DUMP, codec.dump_addresses(0, 2))
    assert sock.interrupted_dumps == DUMP_TRIES
    assert info.value.errno == 4  # EINTR
    assert f"interrupted by concurrent changes {DUMP_TRIES} times" in str(info.value)


def test_dumps_stay_consistent_while_a_thread_churns_links(busy: harness.Namespace) -> None:
    """As on a busy node: another thread adds and removes a link without pause while this
    one lists the links, until the kernel has interrupted a few dumps (a generous bound;
    here it takes a few seconds). Every list returned is whole and has no repeats."""
    stop = threading.Event()

    def churn() -> None:
        with busy.entered():
            while not stop.is_set():
                subprocess.run(["ip", "link", "add", "churn0", "type", "bridge"], check=False)
                subprocess.run(["ip", "link", "del", "churn0"], check=False)

    with busy.entered():
        kernel = NativeKernel()
    worker = threading.Thread(target=churn)
    worker.start()
    recovered, exhausted, deadline = 0, 0, time.monotonic() + 120
    try:
        with busy.entered():
            while recovered < 3 and time.monotonic() < deadline:
                before = kernel._sock.interrupted_dumps
                try:
                    names = [link.name for link in kernel.links()]
                except NetlinkError as exc:  # five interruptions in a row: said, not hidden
                    assert exc.errno == 4
                    exhausted += 1
                    continue
                assert len(names) == len(set(names))
                assert {f"v{i}" for i in range(LINKS // 2)} <= set(names)
                recovered += kernel._sock.interrupted_dumps > before
    finally:
        stop.set()
        worker.join(timeout=60)
        kernel.close()
    assert recovered >= 3, f"no interrupted dump seen in 120 s ({exhausted} exhausted)"
