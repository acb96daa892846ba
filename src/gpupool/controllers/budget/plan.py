"""The round's budget meter and each tenant's budget standing, pure, from the GpuLeases alone.

Nothing is counted in memory between rounds: every round meters every GpuLease it reads of a
tenant whose quota reads the meter (a budget, or quota lent once idle a while: `metered_tenant`)
from the lease's own persisted times (`status.start`, `status.end`; live ones up to `now`) with
the quota core's `Meter.snapshot`, so a restarted controller neither loses nor double-counts
hours.
Ended leases must still exist to count: the lease controller keeps an ended lease until the
budget window its end falls in is over (`Budget.window_end`), whatever its retention.

The meter goes to the admission plan, whose `quota.decide` blocks new pods of a spent `block`
budget (they wait with `BUDGET_EXHAUSTED` until the next window) or admits them as preemptible
(the first victims of any reclaim) for a spent `preemptible` budget: the simulator's rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from gpupool.controllers.kept import Kept
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


def accounting(lease: LeaseRecord, now: float, kept: Kept[Lease] | None = None) -> Lease:
    """`lease.accounting(now)`; `kept`: the last round's while the lease is the same object
    (`controllers.kept`) and its start is past, when it does not depend on `now` (only a start
    still ahead is clamped to it). Made again for every lease every admission round, it was
    most of the round's budget metering."""
    if kept is None:
        return lease.accounting(now)
    return kept.get(lease.key, (lease,), partial(lease.accounting, now), keep=lease.start <= now)


def _metered(
    lease: LeaseRecord, quota: TenantQuota | None, now: float, kept: Kept[Lease] | None
) -> Lease | None:
    """The core lease metering counts, in its tenant quota's resource; None when the lease was
    written in another resource than the quota now counts (its amount cannot be compared)."""
    if quota is None or lease.resource != quota.resource.value:
        return None
    acct = accounting(lease, now, kept)
    if not acct.live and acct.ended_at is None:
        return None  # ended without an end time: nothing to meter to
    return acct


def metered_tenant(quota: TenantQuota) -> bool:
    """Whether admission reads the meter for this tenant: a budget's window, or the idle time
    before its quota is lent. Another tenant's leases are not metered (metering every lease
    each round was most of an admission round at 7,500 pods with no budget at all)."""
    return quota.budget is not None or quota.lend_after_idle_s > 0


def plan_budgets(
    quotas: Iterable[TenantQuota],
    leases: Sequence[LeaseRecord],
    now: float,
    kept: Kept[Lease] | None = None,
) -> BudgetPlan:
    """`kept`: the leases' core leases kept between rounds (`accounting`; None: made afresh)."""
    listed = list(quotas)
    try:
        book = QuotaBook(listed)
    except InvalidQuota:
        return BudgetPlan(None, {})
    reads = {q.name: q for q in book if metered_tenant(q)}
    metered = [
        m
        for le in leases
        if (q := reads.get(le.tenant)) is not None and (m := _metered(le, q, now, kept)) is not None
    ]
    if kept is not None:
        kept.pass_done()
    meter = Meter.snapshot(book, metered, now)
    statuses: dict[str, BudgetStatus] = {}
    for quota in book:
        status = budget_status(quota, meter, (m for m in metered if m.tenant == quota.name), now)
        if status is not None:
            statuses[quota.name] = status
    return BudgetPlan(meter, statuses)
