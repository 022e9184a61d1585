"""Whose lease a key holds: a live lease's routing changes only through its own renewals.

Anyone who can write the subnets prefix can put any value under any key, so the value alone
cannot say whether a node moved (a new VTEP MAC after its device was recreated) or someone
is redirecting that node's running pods. What etcd does say, and a writer cannot fake
without the owner's etcd lease, is the key's *create revision* and the *etcd lease* it is
attached to. The agent remembers per key the version it routes by (its tenure: create
revision, etcd lease, value) and takes a later version

- as is when it routes the same way (the same value: a renewal, a restarted agent taking
  its key over), or comes through the same tenure (same create revision and the same
  non-zero etcd lease: the owner's own renewal path);
- otherwise (a plain put, a put under another lease, a delete and a create, a malformed
  value, a deletion) only once the tenure's etcd lease no longer exists: until then the
  node keeps routing by the remembered value, and the new version is reported.

A lease-less key (etcd lease 0: no node's, it never expires) has no tenure to protect.
An etcd writer that can revoke the owner's etcd lease ends its tenure: that is the same
as deleting a node's lease, and the owner loses its subnet (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable

from pycni.cluster.etcd import KeyValue
from pycni.cluster.lease import LeaseInfo
from pycni.record import record

__all__ = ["Tenures", "Verdict"]


@record
class Tenure:
    kv: KeyValue  # the version routed by
    info: LeaseInfo

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
    (asked only when a key changes hands, once per lease per pass)."""

    def __init__(self, alive: Callable[[int], bool]) -> None:
        self._alive = alive
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

    def judge(self, kv: KeyValue, info: LeaseInfo | None) -> Verdict:
        """The key holds ``kv``, parsed as ``info`` (None: malformed, which the caller
        reports; it counts as no value at all)."""
        if info is None:
            return self.vanished(kv.key)
        held = self.held.get(kv.key)
        if held is None:
            self.held[kv.key] = Tenure(kv, info)
            return Verdict(info, kv)
        same_tenure = (
            kv.lease != 0
            and kv.lease == held.lease
            and kv.create_revision == held.kv.create_revision
        )
        if same_tenure:
            self.held[kv.key] = Tenure(kv, info)
            return Verdict(info, kv)
        if info == held.info:  # routes the same way
            if kv.lease and (kv.lease == held.lease or not self.alive(held.lease)):
                self.held[kv.key] = Tenure(kv, info)  # the owner's key, re-created or taken over
            return Verdict(info, kv)
        if self.alive(held.lease):
            why = (
                f"written by someone other than the holder of etcd lease {held.lease:x} "
                f"(create revision {held.kv.create_revision}), which is alive: still routed "
                f"to {held.info.public_ip} as before"
            )
            return Verdict(held.info, held.kv, why)
        self.held[kv.key] = Tenure(kv, info)
        return Verdict(info, kv)

    def vanished(self, key: str) -> Verdict:
        """``key`` is not in etcd: routed as before while its tenure's lease is alive (an
        expired lease deletes its key; a deletion by hand while it lives is undone by the
        owner's next renewal)."""
        held = self.held.get(key)
        if held is None:
            return Verdict(None, None)
        if self.alive(held.lease):
            return Verdict(held.info, held.kv)
        del self.held[key]
        return Verdict(None, None)

    def forget(self, key: str) -> None:
        """``key`` is this node's own: no tenure is kept for it."""
        self.held.pop(key, None)
