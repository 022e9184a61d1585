"""One pod's lease: acquire it in the pod namespace, keep it (renew at T1, rebind at T2), release.

Each lease has a maintenance thread, like the reference's goroutine per lease. The thread does
not live inside the pod namespace; it enters it for each exchange (a packet socket stays in the
namespace it was opened in). What to do next is decided by :func:`next_step`, a pure function
of the lease times and a clock, so the schedule is unit-tested without waiting.

Differences from the reference: maintenance also stops when the pod's namespace path is gone
(the reference keeps a thread inside a deleted namespace until the lease expires), and leases
can be written to a :class:`~pycni.plugins.ipam.dhcp.store.LeaseStore` so a restarted daemon
carries on renewing them.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pycni.net import link
from pycni.net.link import LinkNotFound
from pycni.net.netlink.client import rtnl
from pycni.net.ns import NetNS
from pycni.plugins.ipam.dhcp.client import (
    Cancelled,
    ClientTuning,
    DhcpClient,
    DhcpError,
    PacketSocket,
    Reply,
    network_of,
)
from pycni.plugins.ipam.dhcp.message import (
    OPT_CLASSLESS_ROUTES,
    OPT_LEASE_TIME,
    OPT_REBINDING_TIME,
    OPT_RENEWAL_TIME,
    OPT_ROUTER,
    OPT_STATIC_ROUTES,
    Message,
    MessageError,
    classful_routes,
    classless_routes,
)
from pycni.record import record
from pycni.spec.result import IPConfig, Route

log = logging.getLogger("pycni.dhcp")

DEFAULT_LEASE_TIME = 3600.0
SCOPE_LINK = 253
BOUND, RENEWING, REBINDING = "bound", "renewing", "rebinding"


@record
class Times:
    """Wall-clock deadlines of a lease (seconds since the epoch)."""

    renew: float
    rebind: float
    expire: float

    @classmethod
    def from_ack(cls, ack: Message, now: float) -> Times:
        lease = float(ack.seconds_option(OPT_LEASE_TIME) or DEFAULT_LEASE_TIME)
        t2 = ack.seconds_option(OPT_REBINDING_TIME)
        t1 = ack.seconds_option(OPT_RENEWAL_TIME)
        return cls(
            renew=now + (float(t1) if t1 is not None else lease / 2),
            rebind=now + (float(t2) if t2 is not None else lease * 85 / 100),
            expire=now + lease,
        )


def next_step(state: str, times: Times, now: float, failed: bool) -> tuple[str, float]:
    """The state after a maintenance round and how long to sleep before the next one.

    ``failed`` tells whether the round's exchange (renew or rebind) failed. The returned state
    ``expired`` means: take the interface down and stop.
    """
    if state == BOUND:
        return (RENEWING, 0.0) if now >= times.renew else (BOUND, times.renew - now)
    if state == RENEWING and not failed:
        return BOUND, max(times.renew - now, 0.0)
    if state == RENEWING:
        return (REBINDING, 0.0) if now > times.rebind else (RENEWING, 0.0)
    if not failed:
        return BOUND, max(times.renew - now, 0.0)
    return ("expired", 0.0) if now > times.expire else (REBINDING, 0.0)


class Lease:
    """A lease held for ``client_id`` on ``ifname`` in the namespace ``netns``."""

    def __init__(
        self,
        client_id: str,
        netns: NetNS,
        ifname: str,
        options: dict[int, bytes],
        tuning: ClientTuning,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[Lease], None] | None = None,
    ) -> None:
        self.client_id = client_id
        self.netns = netns
        self.ifname = ifname
        self.options = options
        self.tuning = tuning
        self.clock = clock
        self.on_change = on_change
        self.ack: Reply | None = None
        self.times = Times(0.0, 0.0, 0.0)
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._release_on_stop = True
        self._thread: threading.Thread | None = None

    # -- exchanges (each one enters the pod namespace for its socket) -----------------------

    def _socket(self) -> tuple[PacketSocket, bytes]:
        """A packet socket on the pod interface (set up if down) and the interface's MAC."""
        with self.netns.entered(), rtnl() as pod_kernel:
            try:
                found = link.get(pod_kernel, self.ifname)
            except LinkNotFound:
                raise DhcpError(f'error looking up "{self.ifname}": Link not found') from None
            if not found.up:
                log.info("%s: link %s down, setting it up", self.client_id, self.ifname)
                pod_kernel.set_link(found.index, up=True)
            mac = bytes.fromhex(found.mac.replace(":", ""))
            return PacketSocket(self.ifname), mac

    def _client(self, mac: bytes) -> DhcpClient:
        return DhcpClient(mac, self.client_id, self.options, self.tuning, cancel=self._stop)

    def _commit(self, reply: Reply) -> None:
        network_of(reply.message)  # an ACK without a mask is refused here, not later
        self.ack = reply
        self.times = Times.from_ack(reply.message, self.clock())
        if self.on_change is not None:
            self.on_change(self)

    def acquire(self) -> None:
        """DISCOVER/REQUEST with backoff until bound; raises DhcpError."""
        sock, mac = self._socket()
        with sock:
            client = self._client(mac)
            self._commit(client.with_backoff(lambda: client.discover_request(sock), self._log))

    def renew(self) -> None:
        assert self.ack is not None
        ack = self.ack
        sock, mac = self._socket()
        with sock:
            client = self._client(mac)
            self._commit(client.with_backoff(lambda: client.renew(sock, ack), self._log))

    def release(self) -> None:
        """Send DHCPRELEASE; fails when the interface is already gone (nothing to send from)."""
        if self.ack is None:
            return
        log.info("%s: releasing lease", self.client_id)
        sock, mac = self._socket()
        with sock:
            self._client(mac).release(sock, self.ack)

    def _log(self, text: str) -> None:
        log.info("%s: %s", self.client_id, text)

    # -- what the result reports -----------------------------------------------------------

    def ip_config(self) -> IPConfig:
        assert self.ack is not None
        ack = self.ack.message
        routers = ack.addrs_option(OPT_ROUTER)
        return IPConfig(address=network_of(ack), gateway=routers[0] if routers else None)

    def routes(self, priority: int = 0) -> list[Route]:
        """Option 121 if present (router 0.0.0.0 = on-link), else option 33 plus a default."""
        assert self.ack is not None
        ack = self.ack.message
        out: list[Route] = []
        try:
            if ack.options.get(OPT_CLASSLESS_ROUTES):
                for r in classless_routes(ack.options[OPT_CLASSLESS_ROUTES]):
                    on_link = r.gateway == ipaddress.IPv4Address(0)
                    out.append(
                        Route(dst=r.dst, gw=r.gateway, scope=SCOPE_LINK if on_link else None)
                    )
            else:
                for r in classful_routes(ack.options.get(OPT_STATIC_ROUTES, b"")):
                    out.append(Route(dst=r.dst, gw=r.gateway))
                gw = self.ip_config().gateway
                if gw is not None:
                    out.append(Route(dst=ipaddress.ip_network("0.0.0.0/0"), gw=gw))
        except MessageError as exc:
            raise DhcpError(f"bad route option in DHCPACK: {exc}") from None
        if priority:
            for route in out:
                route.priority = priority
        return out

    # -- maintenance ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._maintain, name=f"dhcp-{self.client_id[:32]}", daemon=True
        )
        self._thread.start()

    def poke(self) -> None:
        """CHECK: wake the maintenance loop so it looks at the link and the times now."""
        self._poke.set()

    def stop(self, release: bool = True) -> None:
        """Stop maintenance; with ``release`` the loop sends DHCPRELEASE on its way out."""
        self._release_on_stop = release
        self._stop.set()
        self._poke.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.tuning.timeout + 5)
        if self._thread is None and release:
            self._try_release()
        self.netns.close()

    def _try_release(self) -> None:
        try:
            self.release()
        except (DhcpError, OSError) as exc:
            log.warning("%s: failed to release DHCP lease: %s", self.client_id, exc)

    def _still_there(self) -> bool:
        if self.netns.path.startswith("/") and not self.netns.path.startswith("/proc/self/fd"):
            try:
                st = os.stat(self.netns.path)
                if (st.st_dev, st.st_ino) != self.netns.inode():
                    return False
            except OSError:
                return False
        try:
            with self.netns.entered(), rtnl() as pod_kernel:
                return pod_kernel.find_link(self.ifname) is not None
        except OSError:
            return False

    def _maintain(self) -> None:
        state, failed = BOUND, False
        while not self._stop.is_set():
            if not self._still_there():
                log.info("%s: %s is gone, ending maintenance", self.client_id, self.ifname)
                return
            state, sleep = next_step(state, self.times, self.clock(), failed)
            failed = False
            if state == "expired":
                log.warning("%s: lease expired, setting %s down", self.client_id, self.ifname)
                self._set_down()
                return
            if state == BOUND:
                self._poke.wait(sleep)
                self._poke.clear()
                continue
            try:
                self.renew() if state == RENEWING else self.acquire()
                log.info("%s: %s done, lease times %s", self.client_id, state, self.times)
            except Cancelled:
                break
            except (DhcpError, OSError) as exc:
                log.warning("%s: %s failed: %s", self.client_id, state, exc)
                failed = True
                self._stop.wait(1.0)  # the exchange already retried with backoff
        if self._release_on_stop:
            self._try_release()

    def _set_down(self) -> None:
        try:
            with self.netns.entered(), rtnl() as pod_kernel:
                pod_kernel.set_link(link.index_of(pod_kernel, self.ifname), up=False)
        except (OSError, LinkNotFound) as exc:
            log.warning("%s: failed to set %s down: %s", self.client_id, self.ifname, exc)

    # -- persistence ------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        assert self.ack is not None
        return {
            "clientID": self.client_id,
            "netns": self.netns.path,
            "ifName": self.ifname,
            "ack": self.ack.message.encode().hex(),
            "serverMAC": self.ack.source_mac.hex(),
            "options": {str(k): v.hex() for k, v in self.options.items()},
            "times": [self.times.renew, self.times.rebind, self.times.expire],
        }

    def restore(self, record: dict[str, Any]) -> None:
        self.ack = Reply(
            Message.decode(bytes.fromhex(record["ack"])), bytes.fromhex(record["serverMAC"])
        )
        renew, rebind, expire = record["times"]
        self.times = Times(float(renew), float(rebind), float(expire))
