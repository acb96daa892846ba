"""Which loops are owed a round, and since when: the controller's work queue.

A loop is owed a round when an object of a kind it wakes on changed (the watch cache's changes,
heartbeats left out), when it asked to be woken (a leader just elected: every loop), or when its
period has passed since its last round (work that comes due with time: expiries, graces,
heartbeat ages). A loop with nothing owed does not run, so an idle cluster costs the rounds its
periods ask for and nothing per object that did not change.

Pure: times are the caller's monotonic seconds. One entry per loop (a loop decides over its whole
snapshot, so several changes before it runs make one round, as client-go's queue folds repeated
keys); the keys that changed are kept for the round's log and for the depth on /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoopSpec:
    name: str
    wakes_on: frozenset[str]  # watched kinds whose changes owe this loop a round
    period_s: float  # a round at least this often


class LoopQueue:
    def __init__(self, specs: Iterable[LoopSpec], now: float) -> None:
        self.specs = tuple(specs)
        self._last: dict[str, float] = {}  # loop -> when its last round started
        self._owed: dict[str, float] = {s.name: now for s in self.specs}  # all owed at start
        self._keys: dict[str, set[str]] = {s.name: set() for s in self.specs}

    def mark(self, kind: str, key: str, now: float) -> bool:
        """An object of `kind` changed; True when some loop is now owed a round."""
        marked = False
        for spec in self.specs:
            if kind in spec.wakes_on:
                self._owed.setdefault(spec.name, now)
                self._keys[spec.name].add(f"{kind}/{key}")
                marked = True
        return marked

    def mark_all(self, now: float) -> None:
        for spec in self.specs:
            self._owed.setdefault(spec.name, now)

    def due(self, now: float) -> list[str]:
        """The loops to run now, in their order: owed, or past their period."""
        out = []
        for spec in self.specs:
            last = self._last.get(spec.name)
            if spec.name in self._owed or last is None or now - last >= spec.period_s:
                out.append(spec.name)
        return out

    def start(self, name: str, now: float) -> tuple[float, int]:
        """`name`'s round starts: (seconds it waited since first owed, keys it folds)."""
        self._last[name] = now
        owed_at = self._owed.pop(name, now)
        keys = len(self._keys[name])
        self._keys[name].clear()
        return max(0.0, now - owed_at), keys

    def depth(self) -> int:
        """Loops owed a round now."""
        return len(self._owed)

    def wait_s(self, now: float) -> float:
        """Seconds until the earliest period comes due (0 when something is due now)."""
        if self._owed:
            return 0.0
        waits = [self._last.get(s.name, now) + s.period_s - now for s in self.specs]
        return max(0.0, min(waits, default=0.0))
