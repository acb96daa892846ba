"""Where a tenant's usage budget stands in its current window: used, remaining, the window's
bounds, whether it is spent, and when it will be at the current rate.

The rate is what the tenant's live leases hold now, in resource-hours per hour (12 GiB held
burns 12 GiB-hours an hour); the forecast is `now + remaining / rate`, given only when it falls
inside the current window (past the window's end the budget starts afresh, so it never runs out
in this window). Pure: the controller writes it into the GpuQuota status, the simulator may
report it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.quota.lease import Lease
from gpupool.quota.metering import Meter
from gpupool.quota.spec import OnExhaustion, TenantQuota


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    tenant: str
    unit: str  # GiB-hours or GPU-hours
    limit: float
    used: float
    window_start: float
    window_end: float
    rate: float  # resource-hours per hour at what is held now
    on_exhaustion: OnExhaustion
    exhausts_at: float | None  # forecast within this window at the current rate; None: it won't

    @property
    def remaining(self) -> float:
        return max(0.0, self.limit - self.used)

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit


def budget_status(
    quota: TenantQuota, meter: Meter, live: Iterable[Lease], now: float
) -> BudgetStatus | None:
    """The budget's standing at `now` (None when the quota has no budget). `live`: the tenant's
    live leases, for the rate (and for the usage when the meter has not folded them in)."""
    budget = quota.budget
    if budget is None:
        return None
    held = [le for le in live if le.tenant == quota.name and le.live]
    used = meter.window_usage(quota.name, now, held)
    start = budget.window_start(budget.window_of(now))
    end = start + budget.window_s
    rate = quota.resource.hours(sum(le.amount for le in held), 3600.0)
    remaining = max(0.0, budget.limit - used)
    exhausts_at: float | None
    if remaining <= 0:
        exhausts_at = now
    elif rate > 0 and now + remaining / rate * 3600.0 < end:
        exhausts_at = now + remaining / rate * 3600.0
    else:
        exhausts_at = None
    return BudgetStatus(
        tenant=quota.name,
        unit=quota.resource.hour_unit,
        limit=budget.limit,
        used=used,
        window_start=start,
        window_end=end,
        rate=rate,
        on_exhaustion=budget.on_exhaustion,
        exhausts_at=exhausts_at,
    )
