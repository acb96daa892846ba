"""A tenant's budget standing as GpuQuota `status` fields (`state.status_writes.BudgetFields`,
written with the rest of the status by the admission reconciler, in the same merge patch).

`hoursUsed` and the rate are rounded (to 1e-6 hours, about 4 ms of a GiB) so that a status is
rewritten when usage moved, not on every float wobble. A quota without a budget gets the fields
removed (merge-patch nulls), so a removed budget leaves no stale numbers behind.
"""

from __future__ import annotations

from gpupool.quota.budget import BudgetStatus
from gpupool.rfc3339 import format_time
from gpupool.state.status_writes import BudgetFields


def budget_fields(status: BudgetStatus | None) -> BudgetFields | None:
    """None: no budget (its fields are removed)."""
    if status is None:
        return None
    return BudgetFields(
        hours_used=round(status.used, 6),
        hours_remaining=round(status.remaining, 6),
        hours_limit=status.limit,
        hours_unit=status.unit,
        hours_per_hour=round(status.rate, 6),
        window_start=format_time(status.window_start),
        window_end=format_time(status.window_end),
        budget_exhausted=status.exhausted,
        exhaustion_forecast=(
            None if status.exhausts_at is None else format_time(status.exhausts_at)
        ),
    )
