"""Per-container lanes with bounds: calls for one container run one at a time, in order.

A lane holds the call that is running for a container and the calls waiting behind it. The
number of admitted calls (running or waiting) is bounded per container and in total, so a
flood is answered "try again later" at once instead of growing memory and fds. Main thread
only: no locking.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


class Admission(Enum):
    RUN = "run"  # start it now
    WAIT = "wait"  # queued behind an earlier call for the same container
    CONTAINER_FULL = "container-full"
    TOTAL_FULL = "total-full"


class Lanes(Generic[T]):
    def __init__(self, max_per_container: int, max_total: int) -> None:
        self.max_per_container = max_per_container
        self.max_total = max_total
        self._lanes: dict[str, deque[T]] = {}  # key -> waiting calls (the running one is not here)
        self._counts: dict[str, int] = {}  # key -> running + waiting
        self.total = 0

    def admit(self, key: str | None, item: T) -> Admission:
        if self.total >= self.max_total:
            return Admission.TOTAL_FULL
        if key is None:
            self.total += 1
            return Admission.RUN
        count = self._counts.get(key, 0)
        if count >= self.max_per_container:
            return Admission.CONTAINER_FULL
        self._counts[key] = count + 1
        self.total += 1
        if count == 0:
            self._lanes[key] = deque()
            return Admission.RUN
        self._lanes[key].append(item)
        return Admission.WAIT

    def finish(self, key: str | None) -> T | None:
        """The running call of ``key`` is done; returns the next one to start, if any."""
        self.total -= 1
        if key is None:
            return None
        self._counts[key] -= 1
        lane = self._lanes[key]
        if lane:
            return lane.popleft()
        del self._lanes[key]
        del self._counts[key]
        return None

    def drop(self, key: str, item: T) -> bool:
        """Remove a waiting call (its caller left or its deadline passed)."""
        lane = self._lanes.get(key)
        if lane is None or item not in lane:
            return False
        lane.remove(item)
        self._counts[key] -= 1
        self.total -= 1
        return True

    def waiting(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())
