"""Whose lease a key holds: a live lease's routing changes only through its own renewals.

Anyone who can write the subnets prefix can put any value under any key, so the value alone
cannot say whether a node moved (a new VTEP MAC after its device was recreated) or someone
is redirecting that node's running pods. What etcd does say is the key's *create revision*
and the *etcd lease* it is attached to. The agent remembers per key the version it routes
by (its tenure: the version, its value, whether its lease created the key, when it was
first seen) and takes a later version

- as is when it comes under the tenure's own etcd lease (the owner's renewal, or its key
  written back after a deletion), or routes the same way (the same value: a restarted
  agent taking its key over);
- otherwise (a plain put, a put under another lease, a delete and a create, a malformed
  value) only once the tenure's etcd lease no longer exists, or the tenure's key is gone
  and the tenure no longer holds it (below): until then the node keeps routing by the
  remembered value, and the new version is reported.

A deletion is where an etcd writer could make a tenure outlive its owner: a writer's own
lease kept alive would hold a subnet nobody can then lease. A tenure therefore holds a
deleted key only while all of this is true: its etcd lease lives, that lease *created*
the key it held (not a put over someone else's key), the tenure had lasted one TTL when
the key went (a running node's: a key made and deleted within a TTL is nobody's), and the
deletion is less than 2/3 of a TTL old (the owner writes its key back within TTL/3). Else
the tenure ends with the key, and the next version starts a new one. So a route to an
address never outlives the key that named it by more than one TTL.

A lease-less key (etcd lease 0: no node's, it never expires) has no tenure to protect.
An etcd writer that can revoke the owner's etcd lease ends its tenure: that is the same
as deleting a node's lease, and the owner loses its subnet (docs/security.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pycni.cluster.etcd import KeyValue
from pycni.cluster.lease import LeaseInfo
from pycni.record import record

# How long (in TTLs) a deleted key's tenure may hold it: the owner writes it back within
# TTL/3, and a full pass (at most every TTL/3 by default) may come that much later, so the
# route never outlives the key by a whole TTL.
GRACE = 2 / 3


@record
class Tenure:
    kv: KeyValue  # the version routed by
    info: LeaseInfo
    created: bool  # its lease created the key (not a put over someone else's)
    since: float  # when this routing was first seen (carried over by same-value versions)
    gone: float | None = None  # when the key was first seen deleted (None: it is there)

    @property
    def lease(self) -> int:
        return self.kv.lease


@record(frozen=True)
class Verdict:
    """What to route a key by: ``info`` with ``kv`` (None: nothing), and why the version
    etcd holds was refused (None: it was not)."""

    info: LeaseInfo | None
    kv: KeyValue | None
    refused: str | None = None


class Tenures:
    """The tenure of every remote key seen; ``alive`` answers whether an etcd lease exists
    (asked only when a key changes hands, once per lease per pass); ``ttl`` is the
    cluster's lease TTL in seconds."""

    def __init__(
        self,
        alive: Callable[[int], bool],
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._alive = alive
        self.ttl = ttl
        self._clock = clock
        self.held: dict[str, Tenure] = {}
        self._answers: dict[int, bool] = {}

    def new_pass(self) -> None:
        """Forget the liveness answers: leases may have expired since."""
        self._answers = {}

    def alive(self, lease: int) -> bool:
        if not lease:
            return False
        if lease not in self._answers:
            self._answers[lease] = self._alive(lease)
        return self._answers[lease]

    def _start(self, kv: KeyValue, info: LeaseInfo, since: float | None = None) -> Verdict:
        created = kv.lease != 0 and kv.mod_revision == kv.create_revision
        now = self._clock()
        self.held[kv.key] = Tenure(kv, info, created, now if since is None else since)
        return Verdict(info, kv)

    def holds_deleted(self, held: Tenure) -> bool:
        """Whether ``held``, whose key was deleted, still holds it (see the module doc)."""
        assert held.gone is not None
        return (
            held.created
            and held.gone - held.since >= self.ttl
            and self._clock() - held.gone < self.ttl * GRACE
            and self.alive(held.lease)
        )

    def next_expiry(self) -> float | None:
        """When the first deleted key's hold runs out (on this clock), if any is held:
        the agent makes a full pass then, so the route goes on time."""
        ends = [h.gone + self.ttl * GRACE for h in self.held.values() if h.gone is not None]
        return min(ends) if ends else None

    def judge(self, kv: KeyValue, info: LeaseInfo | None) -> Verdict:
        """The key holds ``kv``, parsed as ``info`` (None: malformed, which the caller
        reports; it counts as no value at all)."""
        if info is None:
            return self.vanished(kv.key)
        held = self.held.get(kv.key)
        if held is None:
            return self._start(kv, info)
        if kv.lease != 0 and kv.lease == held.lease:  # the owner's lease: its renewal path
            created = held.created if kv.create_revision == held.kv.create_revision else None
            self._start(kv, info, held.since)
            if created is not None:
                self.held[kv.key].created = created
            return Verdict(info, kv)
        if info == held.info:  # routes the same way
            if kv.lease and (held.gone is not None or not self.alive(held.lease)):
                self._start(kv, info, held.since)  # the owner's key, re-created or taken over
            else:
                held.gone = None  # the key names the same address again
            return Verdict(info, kv)
        if held.gone is not None:
            if not self.holds_deleted(held):
                return self._start(kv, info)  # the key was freed: a new holder
        elif not self.alive(held.lease):
            return self._start(kv, info)
        why = (
            f"written by someone other than the holder of etcd lease {held.lease:x} "
            f"(create revision {held.kv.create_revision}), which is alive: still routed "
            f"to {held.info.public_ip} as before"
        )
        return Verdict(held.info, held.kv, why)

    def vanished(self, key: str) -> Verdict:
        """``key`` is not in etcd: routed as before while its tenure holds the deleted key
        (at most one TTL; an expired lease deletes its key, and a deletion by hand while
        the owner lives is undone by its next renewal), else the tenure ends."""
        held = self.held.get(key)
        if held is None:
            return Verdict(None, None)
        if held.gone is None:
            held.gone = self._clock()
        if self.holds_deleted(held):
            return Verdict(held.info, held.kv)
        del self.held[key]
        return Verdict(None, None)

    def forget(self, key: str) -> None:
        """``key`` is this node's own: no tenure is kept for it."""
        self.held.pop(key, None)
