"""Per-object deadlines of a loop that decides per object: when each object's timed work next
comes due (a node's heartbeat growing old, a lease's expiry or collection), kept in a heap so a
round finds the objects whose time came without a pass over all of them, as client-go's delaying
queue holds keys until their time.

One deadline per key: scheduling it again replaces the last (the heap's old entry goes stale and is
skipped when it surfaces). Pure: times are the caller's (wall) seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Deadlines(Generic[K]):
    def __init__(self) -> None:
        self._at: dict[K, float] = {}  # key -> its deadline
        self._heap: list[tuple[float, int, K]] = []  # entries whose time is not _at's are stale
        self._pushed = 0  # a tie-breaker: keys need not be comparable

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, key: K) -> bool:
        return key in self._at

    def schedule(self, key: K, at: float | None) -> None:
        """`key`'s next deadline (None: it has none)."""
        if at is None:
            self._at.pop(key, None)
            return
        if self._at.get(key) == at:
            return
        self._at[key] = at
        self._pushed += 1
        heapq.heappush(self._heap, (at, self._pushed, key))

    def drop(self, key: K) -> None:
        self._at.pop(key, None)

    def keep(self, wanted: Callable[[K], bool]) -> None:
        """Forget every key `wanted` refuses (objects gone), and the heap's stale entries."""
        self._at = {k: at for k, at in self._at.items() if wanted(k)}
        self._heap = [entry for entry in self._heap if self._at.get(entry[2]) == entry[0]]
        heapq.heapify(self._heap)

    def pop_due(self, now: float) -> set[K]:
        """The keys whose deadline is `now` or before; they have none until scheduled again."""
        due: set[K] = set()
        while self._heap and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            if self._at.get(key) == at:
                del self._at[key]
                due.add(key)
        return due

    def first(self) -> float | None:
        """The soonest deadline (None: none)."""
        while self._heap and self._at.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # scheduled again, or dropped, since
        return self._heap[0][0] if self._heap else None
