"""Allocation from one range set: requested addresses and round-robin search.

The search order is the reference's, so that the Go binary and ours hand out the same
addresses from the same store: start after ``last_reserved_ip.<set>`` when it lies in the
set (else at the first range's start, inclusive), walk every range end to end, jump to the
next range's start (wrapping around), skip each range's gateway, stop at the start again.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import ip_interface

from pycni.net import ipmath
from pycni.net.ipmath import IPAddress
from pycni.plugins.ipam.host_local.config import RangeSet
from pycni.plugins.ipam.host_local.store import Store
from pycni.spec.errors import INTERNAL, INVALID_NETWORK_CONFIG, TRY_AGAIN_LATER, CNIError
from pycni.spec.result import IPConfig


class AllocationError(CNIError):
    """A failure of one set's allocation; the plugin prefixes the set index."""


def candidates(range_set: RangeSet, last: IPAddress | None) -> Iterator[tuple[IPAddress, int]]:
    """(address, range index) in the order the reference tries them."""
    count = len(range_set)
    start_ip: IPAddress | None = None
    cur: IPAddress | None = None
    idx = 0
    if last is not None:
        for i, item in enumerate(range_set):
            if item.contains(last):
                idx, cur = i, last
                break
    if cur is None:
        start_ip = range_set[0].start
    while True:
        item = range_set[idx]
        if cur is None:
            cur = item.start
            start_ip = cur
        else:
            if cur == item.end:
                idx = (idx + 1) % count
                item = range_set[idx]
                cur = item.start
            else:
                cur = ipmath.next_ip(cur)
            if start_ip is None:
                start_ip = cur
            elif cur == start_ip:
                return
        if cur != item.gateway:
            yield cur, idx


class Allocator:
    """Allocates one address of one range set (``set_index`` names its last-IP file)."""

    def __init__(self, range_set: RangeSet, store: Store, set_index: int) -> None:
        self.range_set = range_set
        self.store = store
        self.set_index = set_index

    def get(self, container_id: str, ifname: str, requested: IPAddress | None) -> IPConfig:
        with self.store.locked():
            if requested is not None:
                address = self._reserve_requested(container_id, ifname, requested)
            else:
                address = self._reserve_next(container_id, ifname)
        item = self.range_set.range_for(address)
        assert item is not None
        return IPConfig(
            address=ip_interface((address, item.prefix)),
            gateway=item.gateway,
        )

    def _reserve_requested(self, container_id: str, ifname: str, address: IPAddress) -> IPAddress:
        item = self.range_set.range_for(address)
        if item is None:
            raise AllocationError(
                INVALID_NETWORK_CONFIG, f"{address} not in range set {self.range_set}"
            )
        if address == item.gateway:
            raise AllocationError(
                INVALID_NETWORK_CONFIG, f"requested ip {address} is subnet's gateway"
            )
        if not self.store.reserve(container_id, ifname, address, self.set_index):
            raise AllocationError(
                TRY_AGAIN_LATER,
                f"requested IP address {address} is not available in range set {self.range_set}",
            )
        return address

    def _reserve_next(self, container_id: str, ifname: str) -> IPAddress:
        for held in self.store.get_by_id(container_id, ifname):
            if self.range_set.contains(held):
                raise AllocationError(
                    INTERNAL,
                    f"{held} has been allocated to {container_id}, "
                    "duplicate allocation is not allowed",
                )
        try:
            last = self.store.last_reserved(self.set_index)
        except OSError:
            last = None  # the reference logs this and starts from the beginning
        for address, _idx in candidates(self.range_set, last):
            if self.store.reserve(container_id, ifname, address, self.set_index):
                return address
        raise AllocationError(
            TRY_AGAIN_LATER, f"no IP addresses available in range set: {self.range_set}"
        )

    def release(self, container_id: str, ifname: str) -> None:
        with self.store.locked():
            self.store.release_by_id(container_id, ifname)


def free_count(range_set: RangeSet, reserved: set[IPAddress]) -> int:
    """How many addresses the search could still hand out in this set.

    An address is free when it lies in one of the set's ranges (rangeStart..rangeEnd,
    inclusive), is not that range's gateway, and has no reservation file.
    """
    free = 0
    for item in range_set:
        size = ipmath.span(item.start, item.end)
        if item.gateway is not None and item.contains(item.gateway):
            size -= 1
        taken = sum(1 for a in reserved if item.contains(a) and a != item.gateway)
        free += size - taken
    return free
