"""When the lease loop next has timed work, pure: the soonest time after `now` at which
`leases.plan` or `leases.expiry` would decide something that no watched change announces.

- a Reserved lease: its reservation's timeout (`reserved_timeout_s` after its start: swept);
- a live lease with an expiry still ahead: the expiry (its pod is noticed then);
- a live lease's pod with an expiry notice: the notice's eviction time, and while that is past
  (an eviction the API refused, 429) `retry_s` from now, as every round retried it before;
- an ended lease: the end of its retention and of the budget window that counts it (collected).

Everything else a round decides follows a change to a pod, GpuLease, GpuQuota or GpuNode, which
wakes the loop itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.quota.lease import LeasePhase
from gpupool.quota.spec import Budget
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView

RETRY_S = 5.0  # an eviction that is past due and refused is tried again this often


def _lease_times(
    lease: LeaseRecord,
    pod: PodView | None,
    now: float,
    retention_s: float,
    reserved_timeout_s: float | None,
    budgets: Mapping[str, Budget],
    retry_s: float,
) -> Iterable[float]:
    if lease.phase.terminal:
        ended = lease.end or lease.start
        budget = budgets.get(lease.tenant)
        yield max(ended + retention_s, budget.window_end(ended) if budget else ended)
        return
    if lease.phase is LeasePhase.RESERVED and reserved_timeout_s is not None:
        yield lease.start + reserved_timeout_s
    if lease.expiry is not None:
        yield lease.expiry
    notice = pod.expiry_notice if pod is not None else None
    if notice is not None:
        yield notice.evict_at if notice.evict_at > now else now + retry_s


def lease_due(
    lease: LeaseRecord,
    pod: PodView | None,
    now: float,
    *,
    retention_s: float,
    reserved_timeout_s: float | None,
    budgets: Mapping[str, Budget] | None = None,
    retry_s: float = RETRY_S,
) -> float | None:
    """The soonest of one lease's times after `now` (None: nothing timed). A time already past
    that the round did not act on waits on something else (a pod still running, a budget
    window): a change or the manager's safety net brings it."""
    times = _lease_times(lease, pod, now, retention_s, reserved_timeout_s, budgets or {}, retry_s)
    return min((at for at in times if at > now), default=None)
