"""Node subnet leases in etcd: acquire (race-free), renew, list.

Layout under a prefix (default ``/pycni.dev/network``), the same shape as flannel's::

    <prefix>/config                 flannel's net-conf JSON (see ``etcdconf``)
    <prefix>/subnets/10.244.1.0-24  {"PublicIP": "...", "BackendType": "vxlan",
                                     "BackendData": {...}}

Each subnet key is attached to an etcd lease with a TTL; the agent renews it, so a dead
node's key vanishes by itself. Claiming a subnet is one transaction "create if absent",
so two nodes can never hold the same subnet, however they race. A node that comes back
gets its old subnet: a live key with its address is taken over, else the subnet it
remembers (from its subnet file) is claimed again if still free.
"""

from __future__ import annotations

import builtins
import contextlib
import ipaddress
import json
import random
from typing import Any

from pycni.cluster import subnet as sn
from pycni.cluster.etcd import PAGE_KEYS, Etcd, EtcdError, EtcdResponseTooLarge, KeyValue
from pycni.record import field, record

DEFAULT_PREFIX = "/pycni.dev/network"
DEFAULT_TTL = 60
MAX_ATTEMPTS = 64
MAX_LEASE_VALUE = 16 << 10  # a lease is ~150 bytes; anything this big is not one of ours
MAX_KEY_ANSWER = 4 * MAX_LEASE_VALUE  # one key's answer: base64 and JSON around the value


class LeaseError(RuntimeError):
    """No subnet could be leased (exhausted network, config mismatch, etcd trouble)."""


@record(frozen=True)
class LeaseInfo:
    """What a node publishes about itself with its subnet."""

    public_ip: ipaddress.IPv4Address | ipaddress.IPv6Address  # of the subnet's family
    backend_type: str
    backend_data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "PublicIP": str(self.public_ip),
                "BackendType": self.backend_type,
                "BackendData": self.backend_data,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def parse(cls, raw: bytes) -> LeaseInfo:
        """The lease value's fields, checked for shape; BadLease says what is wrong."""
        if len(raw) > MAX_LEASE_VALUE:
            raise BadLease(f"value of {len(raw)} bytes (at most {MAX_LEASE_VALUE})")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: deeply nested on purpose
            raise BadLease("value is not JSON") from None
        if not isinstance(data, dict):
            raise BadLease("value is not a JSON object")
        public, kind = data.get("PublicIP"), data.get("BackendType", "")
        backend_data = data.get("BackendData") or {}
        if not isinstance(public, str):
            raise BadLease("PublicIP is missing or not a string")
        try:
            address = ipaddress.ip_address(public)
        except ValueError:
            raise BadLease(f"PublicIP {public[:50]!r} is not an IP address") from None
        if str(address) != public:  # one spelling per address: claims compare values
            raise BadLease(f"PublicIP {public[:50]!r} is not in canonical form ({address})")
        if not isinstance(kind, str) or not isinstance(backend_data, dict):
            raise BadLease("BackendType must be a string and BackendData an object")
        return cls(address, kind, backend_data)

    @classmethod
    def from_json(cls, raw: bytes) -> LeaseInfo | None:
        try:
            return cls.parse(raw)
        except BadLease:
            return None


class BadLease(ValueError):
    """A lease key or value that is not a well-formed lease."""


@record
class Listing:
    """The leases under the subnets prefix at one revision, and the keys that were not."""

    leases: dict[sn.Net, tuple[LeaseInfo, KeyValue]] = field(default_factory=dict)
    rejected: list[tuple[str, int, str]] = field(default_factory=list)
    revision: int = 0
    skipped: int = 0  # keys naming no subnet, skipped unread (a paged listing only)


@record(frozen=True)
class Lease:
    subnet: sn.Net
    info: LeaseInfo
    lease_id: int
    ttl: int


class LeaseStore:
    """The subnet registry of one cluster network in etcd."""

    def __init__(self, etcd: Etcd, prefix: str = DEFAULT_PREFIX) -> None:
        self.etcd = etcd
        self.prefix = prefix.rstrip("/")
        # the last listing's keys, parsed, by key: (mod_revision, lease or why not)
        self._parsed: dict[str, tuple[int, tuple[sn.Net, LeaseInfo] | str]] = {}
        self._paged = False  # the last listing did not fit one answer
        # per etcd lease of ours, the create revision of the key it created (-1: unknown)
        self._created: dict[int, int] = {}

    @property
    def config_key(self) -> str:
        return f"{self.prefix}/config"

    @property
    def subnets_prefix(self) -> str:
        return f"{self.prefix}/subnets/"

    def key(self, subnet: sn.Net) -> str:
        return self.subnets_prefix + sn.key_of(subnet)

    def list(self) -> tuple[dict[sn.Net, tuple[LeaseInfo, KeyValue]], int]:
        """Every well-formed live lease and the etcd revision it was read at."""
        listing = self.list_checked()
        return listing.leases, listing.revision

    def list_checked(self) -> Listing:
        """Every live lease, with the malformed ones and why (key, mod_revision, reason).

        One answer holds the whole list while it fits under the cap. When it does not
        (huge values, or a flood of keys: 10,000 names of 850 bytes are over 8 MiB even
        without values) the list is read in pages of key names alone, every key that does
        not name a subnet is skipped there (counted, not read), and each subnet key's
        lease is read alone with a small cap, so junk costs only its own bytes in transit
        and an oversized value only its own lease. The keys are counted first (one small
        answer): more than ``PAGE_KEYS`` are paged without asking for them in one answer,
        which etcd would have to build (8 MiB and more) before it is refused."""
        listing = Listing()
        kvs: builtins.list[KeyValue] = []
        if not self._paged and self.etcd.count_prefix(self.subnets_prefix)[0] > PAGE_KEYS:
            self._paged = True  # a flood of keys: not even asked for in one answer
        if not self._paged:
            try:
                kvs, listing.revision = self.etcd.get_prefix(self.subnets_prefix)
            except EtcdResponseTooLarge:
                self._paged = True
        if self._paged:
            kvs = self._list_paged(listing)
        known, self._parsed = self._parsed, {}
        for kv in kvs:
            before = known.get(kv.key)
            if before is not None and before[0] == kv.mod_revision:
                parsed = before[1]  # the same version of the key: etcd's value is the same
            else:
                parsed = self.parse(kv)
            self._parsed[kv.key] = (kv.mod_revision, parsed)
            if isinstance(parsed, str):
                listing.rejected.append((kv.key, kv.mod_revision, parsed))
            else:
                listing.leases[parsed[0]] = (parsed[1], kv)
        return listing

    def names_subnet(self, key: str) -> bool:
        """Whether ``key`` is a subnet key of this prefix, spelt as this store writes it."""
        subnet = sn.subnet_of_key(key)
        return subnet is not None and key == self.key(subnet)

    def _list_paged(self, listing: Listing) -> builtins.list[KeyValue]:
        keys, listing.revision, seen = self.etcd.scan_prefix(self.subnets_prefix, self.names_subnet)
        listing.skipped = seen - len(keys)
        kvs: builtins.list[KeyValue] = []
        oversized = False
        for item in keys:
            try:
                kv = self.etcd.get(item.key, limit=MAX_KEY_ANSWER, revision=listing.revision)
            except EtcdResponseTooLarge:
                oversized = True
                listing.rejected.append(
                    (item.key, item.mod_revision, f"value over {MAX_LEASE_VALUE} bytes")
                )
                continue
            if kv is not None:
                kvs.append(kv)
        # paged while there is an oversized value; else counted first next time
        self._paged = oversized
        return kvs

    def parse(self, kv: KeyValue) -> tuple[sn.Net, LeaseInfo] | str:
        """The subnet and lease one key holds, or why it holds none (shape only: whether
        this node may route to it is ``validate``'s question)."""
        subnet = sn.subnet_of_key(kv.key)
        if subnet is None or kv.key != self.key(subnet):
            return "key does not name a subnet (ADDRESS-LENGTH)"
        try:
            return subnet, LeaseInfo.parse(kv.value)
        except BadLease as exc:
            return str(exc)

    def acquire(
        self,
        config: sn.NetworkConfig,
        info: LeaseInfo,
        ttl: int,
        previous: sn.Net | None = None,
        rng: random.Random | None = None,
    ) -> Lease:
        """Lease a subnet for ``info.public_ip``: its live one, else ``previous``, else a free one.

        Raises LeaseError when none can be had, EtcdError when etcd cannot be reached.
        """
        lease_id = self.etcd.grant(ttl)
        try:
            for _ in range(MAX_ATTEMPTS):
                leases, _rev = self.list()
                mine = [
                    (s, kv)
                    for s, (other, kv) in leases.items()
                    if other.public_ip == info.public_ip and config.contains(s)
                ]
                if mine:  # the one it had first: someone may have copied our address
                    mine.sort(key=lambda item: (item[0] != previous, item[1].create_revision))
                    subnet, kv = mine[0]
                    # taken over as a new key of our new lease: other agents keep a
                    # deleted key's routes only for the lease that created it (tenure)
                    if self.etcd.delete_if(self.key(subnet), kv.mod_revision) and self._create(
                        subnet, info, lease_id
                    ):
                        if kv.lease and kv.lease != lease_id:
                            self.etcd.revoke(kv.lease)
                        return Lease(subnet, info, lease_id, ttl)
                    continue
                if previous is not None and config.contains(previous) and previous not in leases:
                    candidate = previous
                else:
                    candidate = sn.choose_free(config, leases, rng)
                if self._create(candidate, info, lease_id):
                    return Lease(candidate, info, lease_id, ttl)
                previous = None  # someone else got it first: pick again from a fresh list
        except sn.SubnetError as exc:
            self.etcd.revoke(lease_id)
            raise LeaseError(str(exc)) from None
        except EtcdError:
            with contextlib.suppress(EtcdError):
                self.etcd.revoke(lease_id)
            raise
        self.etcd.revoke(lease_id)
        raise LeaseError(f"could not claim a subnet after {MAX_ATTEMPTS} attempts")

    def _create(self, subnet: sn.Net, info: LeaseInfo, lease_id: int) -> bool:
        """Create ``subnet``'s key under ``lease_id`` if it is free, remembering its create
        revision (the key's identity: a renewal checks it is still the one we made)."""
        revision = self.etcd.create_at(self.key(subnet), info.to_json(), lease_id)
        if revision:
            self._created[lease_id] = revision
        return revision != 0

    def renew(self, lease: Lease) -> str:
        """Keep ``lease`` alive: "renewed", "restored" (someone else had written or deleted
        our key while our etcd lease lived: our value is back, under our lease), or "lost"
        (the etcd lease is gone: expired or revoked). While our etcd lease lives the key is
        ours: other agents route by our value until it ends (see ``tenure``), so a write
        over it is undone here rather than believed. A key someone deleted and created
        again is not ours even with our value in it: it is deleted and created anew under
        our lease, so that it is again a key our lease created."""
        if self.etcd.keepalive(lease.lease_id) <= 0:
            return "lost"
        key = self.key(lease.subnet)
        try:
            kv = self.etcd.get(key, limit=MAX_KEY_ANSWER)
        except EtcdResponseTooLarge:  # someone stored a huge value over ours
            kv = self.etcd.get(key, limit=MAX_KEY_ANSWER, keys_only=True)
        value = lease.info.to_json()
        created = self._created.get(lease.lease_id, -1)
        ours = kv is not None and created in (-1, kv.create_revision)
        if kv is not None and ours and kv.lease == lease.lease_id and kv.value == value:
            return "renewed"
        if kv is None:
            done = self._create(lease.subnet, lease.info, lease.lease_id)
        elif ours:
            done = self.etcd.replace(key, value, kv.mod_revision, lease.lease_id)
        else:
            done = self.etcd.delete_if(key, kv.mod_revision) and self._create(
                lease.subnet, lease.info, lease.lease_id
            )
        return "restored" if done else "renewed"  # a racing write: undone next time

    def publish(self, lease: Lease, info: LeaseInfo) -> Lease:
        """Update what we publish (e.g. a new VTEP MAC) under the same lease."""
        self.etcd.put(self.key(lease.subnet), info.to_json(), lease.lease_id)
        return Lease(lease.subnet, info, lease.lease_id, lease.ttl)

    def release(self, lease: Lease) -> None:
        self.etcd.revoke(lease.lease_id)
        self._created.pop(lease.lease_id, None)
