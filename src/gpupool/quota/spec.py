"""One tenant's quota: what it is guaranteed, what it may hold, lend and borrow, and its budget.

Quantities are integers in the quota's `resource` (bytes for `gpu-memory`, milli-GPU for `gpu`).

- `guaranteed`: usage at or below this is never reclaimed.
- `nominal`: what the tenant may hold without borrowing (guaranteed <= nominal).
- `borrow_limit`: how far above nominal it may go on the cohort's unused quota (None: no limit
  beyond what the cohort has; 0: never borrows).
- `lend_limit`: how much of its unused nominal quota others may borrow (None: all of it).
- `compute_limit_milli`, `max_pods`: hard caps that are never borrowed (None: none).
- `budget`: a usage budget per window (GiB-hours or GPU-hours) and what happens when it runs out.
- `reclaim_grace_s`: how long this tenant's borrowed pods get between notice and eviction.
- `lend_after_idle_s`: how long quota must have stayed unused before others may borrow it
  (0: at once). Quota the tenant held within that time stays its own (`quota.idle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gpupool.domain.errors import InvalidQuota
from gpupool.quota.resource import Resource


class OnExhaustion(Enum):
    BLOCK = "block"  # new work waits until the next window
    PREEMPTIBLE = "preemptible"  # new work is admitted, but only as reclaimable
    DRAIN = "drain"  # new work waits, and running work is noticed and evicted after its grace

    @property
    def holds_new_work(self) -> bool:
        """New pods wait for the next window (block and drain)."""
        return self is not OnExhaustion.PREEMPTIBLE

    @classmethod
    def parse(cls, text: str) -> OnExhaustion:
        for member in cls:
            if member.value == text.strip():
                return member
        raise InvalidQuota(f"on-exhaustion must be 'block', 'preemptible' or 'drain'; got {text!r}")


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `limit` resource-hours per `window_s` seconds; windows start at time 0."""

    limit: float
    window_s: float
    on_exhaustion: OnExhaustion = OnExhaustion.BLOCK

    def __post_init__(self) -> None:
        if not self.limit >= 0:
            raise InvalidQuota(f"a budget must be 0 or more hours; got {self.limit}")
        if not self.window_s > 0:
            raise InvalidQuota(
                f"a budget window must be a positive number of seconds; got {self.window_s}"
            )

    def window_of(self, now: float) -> int:
        return int(now // self.window_s)

    def window_start(self, index: int) -> float:
        return index * self.window_s

    def window_end(self, at: float) -> float:
        """The end of the window `at` falls in: usage at `at` counts until then."""
        return self.window_start(self.window_of(at) + 1)


@dataclass(frozen=True, slots=True)
class TenantQuota:
    name: str
    nominal: int
    guaranteed: int = 0
    resource: Resource = Resource.GPU_MEMORY
    borrow_limit: int | None = None
    lend_limit: int | None = None
    compute_limit_milli: int | None = None
    max_pods: int | None = None
    budget: Budget | None = None
    priority: int = 0
    cohort: str | None = None
    reclaim_grace_s: float = 30.0
    lend_after_idle_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidQuota("a tenant quota needs a tenant name")
        who = f"tenant {self.name!r}"
        fmt = self.resource.format
        for label, value in (
            ("nominal quota", self.nominal),
            ("guaranteed quota", self.guaranteed),
            ("borrow limit", self.borrow_limit),
            ("lend limit", self.lend_limit),
            ("compute limit", self.compute_limit_milli),
            ("pod limit", self.max_pods),
        ):
            if value is not None and value < 0:
                raise InvalidQuota(f"{who}: the {label} must be 0 or more; got {value}")
        if self.guaranteed > self.nominal:
            raise InvalidQuota(
                f"{who}: guaranteed quota ({fmt(self.guaranteed)}) is above the nominal quota "
                f"({fmt(self.nominal)}); raise nominal or lower guaranteed"
            )
        if self.lend_limit is not None and self.lend_limit > self.nominal:
            raise InvalidQuota(
                f"{who}: lend limit ({fmt(self.lend_limit)}) is above the nominal quota "
                f"({fmt(self.nominal)}); a tenant can lend only quota it has"
            )
        if self.cohort is None and self.borrow_limit:
            raise InvalidQuota(
                f"{who}: has a borrow limit but no cohort to borrow from; set a cohort or drop it"
            )
        if not self.reclaim_grace_s >= 0:
            raise InvalidQuota(
                f"{who}: the reclaim grace period must be 0 or more seconds; "
                f"got {self.reclaim_grace_s}"
            )

        if not self.lend_after_idle_s >= 0:
            raise InvalidQuota(
                f"{who}: the idle time before lending must be 0 or more seconds; "
                f"got {self.lend_after_idle_s}"
            )

    @property
    def lendable(self) -> int:
        """The part of nominal that others in the cohort may borrow while it is unused."""
        if self.cohort is None:
            return 0
        return self.nominal if self.lend_limit is None else self.lend_limit

    @property
    def private(self) -> int:
        """The part of nominal nobody else may borrow."""
        return self.nominal - self.lendable

    def may_borrow(self, amount: int) -> bool:
        if self.cohort is None:
            return amount <= 0
        return self.borrow_limit is None or amount <= self.borrow_limit
