"""The round's budget meter and each tenant's budget standing, pure, from the GpuLeases alone.

Nothing is counted in memory between rounds: every round meters every GpuLease it reads from
the lease's own persisted times (`status.start`, `status.end`; live ones up to `now`) with the
quota core's `Meter.snapshot`, so a restarted controller neither loses nor double-counts hours.
Ended leases must still exist to count: the lease controller keeps an ended lease until the
budget window its end falls in is over (`Budget.window_end`), whatever its retention.

The meter goes to the admission plan, whose `quota.decide` blocks new pods of a spent `block`
budget (they wait with `BUDGET_EXHAUSTED` until the next window) or admits them as preemptible
(the first victims of any reclaim) for a spent `preemptible` budget: the simulator's rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.errors import InvalidQuota
from gpupool.quota.book import QuotaBook
from gpupool.quota.budget import BudgetStatus, budget_status
from gpupool.quota.lease import Lease
from gpupool.quota.metering import Meter
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord


@dataclass(frozen=True, slots=True)
class BudgetPlan:
    meter: Meter | None  # None when the quotas clash (the admission plan admits nothing then)
    statuses: Mapping[str, BudgetStatus]  # tenants with a budget


class KeptAccounts:
    """`LeaseRecord.accounting`, kept per lease between rounds: while a lease is the very object
    of the last round (the readers hand the same decoded object for an unchanged
    resourceVersion) and its start is past, its core lease is the same whatever the round's
    `now` (only a start still ahead of `now` is clamped to it). Making it again for every lease
    every admission round was most of the round's budget metering."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[LeaseRecord, Lease]] = {}
        self._next: dict[str, tuple[LeaseRecord, Lease]] = {}

    def of(self, lease: LeaseRecord, now: float) -> Lease:
        kept = self._kept.get(lease.key)
        if kept is not None and kept[0] is lease and lease.start <= now:
            acct = kept[1]
        else:
            acct = lease.accounting(now)
        if lease.start <= now:
            self._next[lease.key] = (lease, acct)
        return acct

    def round_done(self) -> None:
        """The leases of this round are the ones kept for the next (those gone are forgotten)."""
        self._kept, self._next = self._next, {}


def _metered(
    lease: LeaseRecord, quota: TenantQuota | None, now: float, accounts: KeptAccounts | None
) -> Lease | None:
    """The core lease metering counts, in its tenant quota's resource; None when the lease was
    written in another resource than the quota now counts (its amount cannot be compared)."""
    if quota is None or lease.resource != quota.resource.value:
        return None
    acct = lease.accounting(now) if accounts is None else accounts.of(lease, now)
    if not acct.live and acct.ended_at is None:
        return None  # ended without an end time: nothing to meter to
    return acct


def plan_budgets(
    quotas: Iterable[TenantQuota],
    leases: Sequence[LeaseRecord],
    now: float,
    accounts: KeptAccounts | None = None,
) -> BudgetPlan:
    """`accounts`: the leases' core leases kept between rounds (None: each made afresh)."""
    listed = list(quotas)
    try:
        book = QuotaBook(listed)
    except InvalidQuota:
        return BudgetPlan(None, {})
    metered = [
        m for le in leases if (m := _metered(le, book.get(le.tenant), now, accounts)) is not None
    ]
    if accounts is not None:
        accounts.round_done()
    meter = Meter.snapshot(book, metered, now)
    statuses: dict[str, BudgetStatus] = {}
    for quota in book:
        status = budget_status(quota, meter, (m for m in metered if m.tenant == quota.name), now)
        if status is not None:
            statuses[quota.name] = status
    return BudgetPlan(meter, statuses)
