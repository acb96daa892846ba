"""`onExhaustion: drain`, the pure decision: which running pods of a tenant whose budget window
is spent get a drain notice, which are evicted, and which notices are withdrawn.

Over one snapshot (the admission round's pods and its budget standings, `budget.plan`):
- a tenant whose budget is spent this window and whose quota says `drain`: each of its pods that
  holds a card (admitted, bound to a node, not finished, not being deleted) gets the notice
  `gpupool.io/drain-notice` (the reclaim notice's JSON: `{at, evictAt, claimant: the tenant,
  for: the pod}`) and an event; once its tenant's grace period (`reclaimGracePeriodSeconds`, as
  for reclaim and lease expiry) has passed, it is evicted through the Eviction API (`notices`,
  shared with reclaim, lease expiry and defragmentation). New pods of such a tenant wait at the
  gate meanwhile, as under `block` (`quota.admission`).
- a noticed pod whose tenant's budget is no longer spent (a new window began, the limit was
  raised, the quota no longer drains) has its notice withdrawn, before or after the deadline,
  as long as it was not evicted yet; a notice from a past window whose new window is spent
  again is given afresh, with a new grace period.
The deadline lives on the pod and a pod being deleted is skipped, so a restarted controller
carries on and no pod is evicted twice. Once evicted, the pod's GpuLease gets `status.reclaim`
with reason `BudgetDrain`; `leases.plan` ends it, once the pod is gone, Released with reason
`BudgetDrained`, metered to then (the grace period counts: the card was held).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.controllers.notices.plan import (
    EvictPod,
    NoticePod,
    WithdrawNotice,
    deadline,
    given_and_over,
    new_notice,
    settle,
)
from gpupool.quota.budget import BudgetStatus
from gpupool.quota.spec import OnExhaustion
from gpupool.rfc3339 import format_time
from gpupool.state.pods import PodView

DEFAULT_GRACE_S = 30.0  # a tenant's grace when its GpuQuota says none (`TenantQuota`'s default)


@dataclass(frozen=True, slots=True)
class DrainPlan:
    notices: tuple[NoticePod, ...] = ()
    evictions: tuple[EvictPod, ...] = ()
    withdrawals: tuple[WithdrawNotice, ...] = ()


def draining(status: BudgetStatus | None) -> bool:
    return status is not None and status.exhausted and status.on_exhaustion is OnExhaustion.DRAIN


def _holds_a_card(pod: PodView) -> bool:
    return pod.holds_quota and pod.node is not None and not pod.deleting


def _spent(status: BudgetStatus) -> str:
    return (
        f"tenant {status.tenant!r} has used {status.used:.4g} of {status.limit:g} "
        f"{status.unit} this window (on exhaustion: drain)"
    )


def plan_drain(
    pods: Iterable[PodView],
    budgets: Mapping[str, BudgetStatus],
    grace_s: Mapping[str, float],
    now: float,
) -> DrainPlan:
    """`budgets`: the tenants' budget standings this round; `grace_s`: each tenant's
    `reclaimGracePeriodSeconds` (absent: `DEFAULT_GRACE_S`)."""
    notices: list[NoticePod] = []
    evictions: list[EvictPod] = []
    withdrawals: list[WithdrawNotice] = []
    for pod in pods:
        status = budgets.get(pod.tenant)
        notice = pod.drain_notice
        if not draining(status):
            if notice is not None and not pod.deleting and not pod.terminal:
                why = (
                    "a new budget window began"
                    if status is not None and status.window_start > notice.at
                    else "the budget is no longer spent, or no longer drains"
                )
                withdrawals.append(
                    WithdrawNotice(pod, f"drain notice withdrawn: {why}; the pod keeps running")
                )
            continue
        assert status is not None
        if not _holds_a_card(pod):
            continue
        if notice is None or notice.at < status.window_start:  # none, or one of a past window
            grace = grace_s.get(pod.tenant, DEFAULT_GRACE_S)
            given = new_notice(now, grace, pod.tenant, pod.key)
            notices.append(
                NoticePod(
                    pod,
                    given,
                    f"{_spent(status)}: the pod will be evicted at "
                    f"{deadline(given.evict_at, grace)}; the next window starts at "
                    f"{format_time(status.window_end)}",
                )
            )
            continue
        evicted = f"evicted: {_spent(status)} ({given_and_over(notice)})"
        outcome = settle(pod, notice, now, withdraw=None, evicted=evicted)
        if isinstance(outcome, EvictPod):
            evictions.append(outcome)
    return DrainPlan(tuple(notices), tuple(evictions), tuple(withdrawals))
