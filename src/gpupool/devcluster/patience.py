"""How long `up` waits for work that grows with the cluster: pure (readings and times in,
verdicts out), so that when a wait gives up, and what it says, is tested without a cluster.

Two kinds of wait:

- **a count** (nodes Ready, GpuNodes beating): `ProgressWatch` keeps waiting while the count
  grows; it gives up when the count has not grown for `stall_s` (the `--timeout`), or when
  the whole wait passes `Allowance.limit_s(items)` = `stall_s` + `per_item_s` × items, a cap
  that grows with the cluster;
- **a yes/no** whose answer takes longer on a bigger cluster (the extender's cache sync, the
  web view's first read): a deadline of `Allowance.limit_s(items)`.

`poll_interval_s` spaces the polls of a count so that a poll (a LIST of every node) stays a
small part of the API server's work on a big cluster.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# What `up` allows per fake node, on top of `--timeout`: to become Ready (kwok marks it, the
# node lifecycle controller lifts its not-ready taint) and to get a GpuNode with a heartbeat.
# At 1,213 nodes: 60 s + 0.5 s × 1,213 ≈ 11 min at most, and never more than 60 s without one
# more node ready.
PER_NODE_S = 0.5
# For a yes/no wait that reads the whole cluster once (an extender's cache sync, the web view's
# first read): 60 s + 0.05 s × 1,213 ≈ 2 min.
PER_NODE_READ_S = 0.05


@dataclass(frozen=True, slots=True)
class Allowance:
    """`stall_s` without progress; `stall_s + per_item_s × items` in all."""

    stall_s: float
    per_item_s: float = 0.0

    def limit_s(self, items: int) -> float:
        return self.stall_s + self.per_item_s * max(items, 0)

    def describe(self, items: int, unit: str) -> str:
        if self.per_item_s == 0:
            return f"{self.limit_s(items):g}s"
        return (
            f"{self.limit_s(items):g}s = {self.stall_s:g}s + {self.per_item_s:g}s "
            f"per {unit} × {items}"
        )


@dataclass(frozen=True, slots=True)
class Reading:
    """`done` of `total` (e.g. 812 of 1,213 nodes Ready)."""

    done: int
    total: int


class Verdict(enum.Enum):
    READY = "ready"
    WAIT = "wait"
    GIVE_UP = "give up"


class ProgressWatch:
    """A count's wait. `observe(reading, now)` for each poll (None: the poll got no answer)
    says READY, WAIT or GIVE_UP; after GIVE_UP, `reason` says why."""

    def __init__(
        self, what: str, items: int, allowance: Allowance, now: float, *, unit: str = "node"
    ) -> None:
        self.what = what
        self.items = items
        self.unit = unit
        self.allowance = allowance
        self.started = now
        self.last_progress = now
        self.best: Reading | None = None
        self.reason = ""

    def observe(self, reading: Reading | None, now: float) -> Verdict:
        if reading is not None and reading.done >= reading.total:
            self.best = reading
            return Verdict.READY
        if reading is not None and (self.best is None or reading.done > self.best.done):
            if self.best is not None or reading.done > 0:
                self.last_progress = now
            self.best = reading
        elapsed = now - self.started
        stalled = now - self.last_progress
        if stalled > self.allowance.stall_s:
            if self.best is None:
                self.reason = f"no answer about {self.what} in {stalled:.0f}s"
            elif self.best.done == 0:
                self.reason = f"{self._count()}: none in {stalled:.0f}s"
            else:
                self.reason = (
                    f"{self._count()} after {elapsed:.0f}s: stuck, none more in the "
                    f"last {stalled:.0f}s"
                )
            return Verdict.GIVE_UP
        if elapsed > self.allowance.limit_s(self.items):
            self.reason = (
                f"{self._count()} after {elapsed:.0f}s, over the allowance of "
                f"{self.allowance.describe(self.items, self.unit)}"
            )
            return Verdict.GIVE_UP
        return Verdict.WAIT

    def _count(self) -> str:
        if self.best is None:
            return f"no answer about {self.what}"
        return f"{self.best.done} of {self.best.total} {self.what}"


def poll_interval_s(items: int) -> float:
    """0.1 s up to 100 items, then 1 ms per item, at most 2 s (1.2 s at 1,213 nodes)."""
    return min(2.0, max(0.1, items / 1000))
