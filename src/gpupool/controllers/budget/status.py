"""A tenant's budget standing as GpuQuota `status` fields (written with the rest of the status by
the admission reconciler, in the same merge patch).

`hoursUsed` and the rate are rounded (to 1e-6 hours, about 4 ms of a GiB) so that a status is
rewritten when usage moved, not on every float wobble. A quota without a budget gets the fields
removed (merge-patch nulls), so a removed budget leaves no stale numbers behind.
"""

from __future__ import annotations

from gpupool.ports import Json
from gpupool.quota.budget import BudgetStatus
from gpupool.rfc3339 import format_time

FIELDS = (
    "hoursUsed",
    "hoursRemaining",
    "hoursLimit",
    "hoursUnit",
    "hoursPerHour",
    "windowStart",
    "windowEnd",
    "budgetExhausted",
    "exhaustionForecast",
)


def budget_status_json(status: BudgetStatus | None) -> Json:
    if status is None:
        return dict.fromkeys(FIELDS)
    return {
        "hoursUsed": round(status.used, 6),
        "hoursRemaining": round(status.remaining, 6),
        "hoursLimit": status.limit,
        "hoursUnit": status.unit,
        "hoursPerHour": round(status.rate, 6),
        "windowStart": format_time(status.window_start),
        "windowEnd": format_time(status.window_end),
        "budgetExhausted": status.exhausted,
        "exhaustionForecast": (
            None if status.exhausts_at is None else format_time(status.exhausts_at)
        ),
    }
