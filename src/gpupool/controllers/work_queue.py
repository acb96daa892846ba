"""Which loops are owed a round, and since when: the controller's work queue.

A loop is owed a round when an object of a kind it wakes on changed (the watch cache's changes,
heartbeats left out), when it asked to be woken (a leader just elected: every loop), when the
deadline its last round computed comes (`schedule`: the work that comes due with time, such as
the next lease expiry, grace end or heartbeat timeout), or when its period has passed since its
last round (the safety net, in minutes). A loop with nothing owed does not run, so an idle
cluster costs the rounds its deadlines ask for and nothing per object that did not change.
A loop with a `min_gap_s` runs at most that often: what changes meanwhile folds into its next
round (as client-go's rate-limited queue holds a key back). For a loop whose round costs what the
cluster's size does and whose readers look only every few seconds (/metrics, GpuPool status),
so that a fill of thousands of pods does not cost a pass over every card per pod.

Pure: times are the caller's monotonic seconds. One entry per loop: several changes before it
runs make one round, as client-go's queue folds repeated keys, and the round is handed the keys
that changed (`owed`: a loop that decides per object, node health, looks only at them; the
others decide over their whole snapshot), or everything when nothing narrower is known.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Owed:
    """What a round is owed for: the watched changes since the loop's last round, as (kind,
    key), or everything (its first round, a wake, its period: the safety net). A loop that
    decides per object looks only at what changed; one that decides over its whole snapshot
    ignores it."""

    changed: frozenset[tuple[str, str]] = frozenset()
    everything: bool = True


EVERYTHING = Owed()


@dataclass(frozen=True, slots=True)
class LoopSpec:
    name: str
    wakes_on: frozenset[str]  # watched kinds whose changes owe this loop a round
    period_s: float  # a round at least this often (the safety net)
    min_gap_s: float = 0.0  # a round at most this often (0: as soon as it is owed)


class LoopQueue:
    def __init__(self, specs: Iterable[LoopSpec], now: float) -> None:
        self.specs = tuple(specs)
        self._period = {s.name: s.period_s for s in self.specs}
        self._last: dict[str, float] = {}  # loop -> when its last round started
        self._owed: dict[str, float] = {s.name: now for s in self.specs}  # all owed at start
        self._keys: dict[str, set[tuple[str, str]]] = {s.name: set() for s in self.specs}
        self._whole: set[str] = {s.name for s in self.specs}  # owed a round over everything
        self._deadline: dict[str, float] = {}  # loop -> when its timed work comes due

    def mark(self, kind: str, key: str, now: float) -> bool:
        """An object of `kind` changed; True when some loop is now owed a round."""
        marked = False
        for spec in self.specs:
            if kind in spec.wakes_on:
                self._owed.setdefault(spec.name, now)
                self._keys[spec.name].add((kind, key))
                marked = True
        return marked

    def mark_all(self, now: float) -> None:
        for spec in self.specs:
            self._owed.setdefault(spec.name, now)
            self._whole.add(spec.name)

    def schedule(self, name: str, at: float | None) -> None:
        """`name`'s next timed work comes due `at` (None: none; its period still owes a round).
        Set after each round from what the round saw; a change before then runs it sooner."""
        if at is None:
            self._deadline.pop(name, None)
        else:
            self._deadline[name] = at

    def _next(self, spec: LoopSpec) -> float:
        """When `spec`'s loop comes due with time: its deadline or its period, the sooner."""
        last = self._last.get(spec.name)
        if last is None:
            return float("-inf")
        return min(last + spec.period_s, self._deadline.get(spec.name, float("inf")))

    def _held_until(self, spec: LoopSpec) -> float:
        """Before this time an owed round waits (its `min_gap_s` since the last one)."""
        last = self._last.get(spec.name)
        return float("-inf") if last is None else last + spec.min_gap_s

    def _due(self, spec: LoopSpec, now: float) -> bool:
        if spec.name in self._owed:
            return now >= self._held_until(spec)
        return now >= self._next(spec)

    def due(self, now: float) -> list[str]:
        """The loops to run now, in their order: owed (and past their gap), past their deadline
        or their period."""
        return [s.name for s in self.specs if self._due(s, now)]

    def keys(self, name: str, most: int = 5) -> list[str]:
        """A few of the keys that owe `name` its round (for the round's log)."""
        return [f"{kind}/{key}" for kind, key in sorted(self._keys[name])[:most]]

    def owed(self, name: str, now: float) -> Owed:
        """What `name`'s round, starting now, is owed for (read before `start`)."""
        last = self._last.get(name)
        if name in self._whole or last is None or now >= last + self._period[name]:
            return EVERYTHING
        return Owed(frozenset(self._keys[name]), everything=False)

    def start(self, name: str, now: float) -> tuple[float, int]:
        """`name`'s round starts: (seconds it waited since first owed, keys it folds)."""
        self._last[name] = now
        self._whole.discard(name)
        self._deadline.pop(name, None)  # the round computes the next one
        owed_at = self._owed.pop(name, now)
        keys = len(self._keys[name])
        self._keys[name].clear()
        return max(0.0, now - owed_at), keys

    def depth(self) -> int:
        """Loops owed a round now."""
        return len(self._owed)

    def wait_s(self, now: float) -> float:
        """Seconds until the next loop comes due: owed past its gap, at its deadline or period
        (0 when one is due now)."""
        return max(
            0.0,
            min(
                (
                    (self._held_until(s) if s.name in self._owed else self._next(s)) - now
                    for s in self.specs
                ),
                default=0.0,
            ),
        )
