"""Idle lending: quota a lender held within its `lend_after_idle_s` is not lent yet.

The second seed's platform lent only quota idle for a while (30 minutes there), so that a team
between two jobs does not find its quota borrowed the moment its first job ends. For a lender
with an idle time T, the quota it used at any moment in the last T seconds (its peak usage over
`[now - T, now]`, capped at nominal) counts as its own: of its unused quota only what lies above
that peak may be borrowed. With T = 0 the peak is what it holds now: today's behaviour.

The peak comes from leases' own times (`reserved_at`, `ended_at`): the simulator's ended leases
and the live system's GpuLeases serve alike (`Meter` keeps the recently ended ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.quota.lease import Lease


@dataclass(frozen=True, slots=True)
class RecentPeak:
    amount: int  # the most the tenant held at once in [since, now]
    falls_at: float | None  # the earliest time the peak can drop (a lease's end + the idle time)


def recent_peak(leases: Iterable[Lease], since: float, now: float, idle_s: float) -> RecentPeak:
    """The most `leases` (one tenant's, ended or live) held at once over `[since, now]`."""
    events: list[tuple[float, int]] = []
    ends: list[float] = []
    for lease in leases:
        end = now if lease.ended_at is None else lease.ended_at
        if end <= since or lease.reserved_at > now:
            continue
        events.append((max(lease.reserved_at, since), lease.amount))
        if lease.ended_at is not None:
            events.append((end, -lease.amount))
            ends.append(end)
    events.sort(key=lambda e: (e[0], e[1]))  # at one instant, ends before starts
    held = peak = 0
    for _, delta in events:
        held += delta
        peak = max(peak, held)
    return RecentPeak(peak, min(ends) + idle_s if ends else None)
