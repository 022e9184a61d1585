"""The calls' deadlines in one heap, fired by the daemon's main loop.

Setting a call's timer again (or finishing the call) bumps its generation, which voids the
older heap entry instead of searching the heap for it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Container, Iterator

from pycni.daemon.call import Call


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Call]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def set(self, call: Call, when: float) -> None:
        """``call``'s one timer is now due at ``when`` (monotonic)."""
        call.timer_gen += 1
        heapq.heappush(self._heap, (when, next(self._seq), call.timer_gen, call))

    @staticmethod
    def cancel(call: Call) -> None:
        call.timer_gen += 1

    def next_at(self) -> float | None:
        """When the earliest live timer is due (None: no timer)."""
        while self._heap and self._heap[0][2] != self._heap[0][3].timer_gen:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def due(self, now: float, live: Container[Call]) -> Iterator[Call]:
        """The calls of ``live`` whose timer is due, one at a time (a handler may set timers)."""
        while self._heap and self._heap[0][0] <= now:
            _when, _seq, gen, call = heapq.heappop(self._heap)
            if gen == call.timer_gen and call in live:
                call.timer_gen += 1
                yield call

    def compact(self, live: int) -> None:
        """Drop void entries once they are most of a large heap (finished calls linger)."""
        if len(self._heap) > 1024 and len(self._heap) > 4 * live:
            self._heap = [t for t in self._heap if t[2] == t[3].timer_gen]
            heapq.heapify(self._heap)
