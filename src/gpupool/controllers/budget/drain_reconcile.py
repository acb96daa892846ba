"""`onExhaustion: drain`, applied: `BudgetDrainReconciler` takes the admission round (its pods,
GpuQuotas and budget standings), asks the pure `budget.drain.plan_drain` and writes it through
the writes reclaim and lease expiry use (`reclaim.notices`): the notice `gpupool.io/drain-notice`
with a `BudgetDrain` event, the eviction through the Eviction API (a PodDisruptionBudget's refusal
retried every round) with a `BudgetDrained` event and the mark on the pod's GpuLease
(`status.reclaim`, reason `BudgetDrain`, so the lease ends Released for that reason once the pod
is gone), and withdrawals (`DrainWithdrawn`). A write that fails sets that pod aside with a
ReconcileFailed event and the others go on (`controllers.contain`); the next round plans it
again from the pods' annotations."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.wire import names
from gpupool.controllers.admission.reconcile import LOOP, AdmissionRound
from gpupool.controllers.budget.drain import DrainPlan, plan_drain
from gpupool.controllers.contain import Containment, run_one
from gpupool.controllers.leases.plan import BUDGET_DRAIN
from gpupool.controllers.reclaim.notices import evict_noticed, give_notice, withdraw_patch
from gpupool.controllers.reclaim.plan import EvictPod, NoticePod, WithdrawNotice
from gpupool.ports import ClusterApi, Json, Outcomes
from gpupool.rfc3339 import format_time

log = logging.getLogger("gpupool.controller.drain")


class BudgetDrainReconciler:
    """Runs after the admission round, over its reads and budget standings."""

    def __init__(
        self,
        api: ClusterApi,
        outcomes: Outcomes | None = None,
        contain: Containment | None = None,
    ) -> None:
        self.api = api
        self.outcomes = outcomes
        self.contain = contain if contain is not None else Containment(LOOP, api)

    async def reconcile(self, admission: AdmissionRound) -> DrainPlan:
        grace = {q.name: q.reclaim_grace_s for q in admission.quotas}
        plan = plan_drain(admission.pods, admission.budgets, grace, admission.now)
        try:
            await apply_drain(
                self.api, plan, admission.raw, admission.now, self.outcomes, self.contain
            )
        finally:
            await self.contain.report(admission.now)
        return plan


async def _mark_lease(api: ClusterApi, eviction: EvictPod, stamp: str) -> None:
    """Mark the evicted pod's GpuLease (named after the pod's uid) so it ends for the drain.
    Best effort: without the mark the lease is released, metered the same, as for any pod."""
    pod = eviction.pod
    record = {"at": stamp, "reason": BUDGET_DRAIN, "message": eviction.message[:1024]}
    try:
        if not await api.patch_lease_status(pod.namespace, pod.uid, {"reclaim": record}):
            log.warning("no GpuLease %s/%s to mark as drained", pod.namespace, pod.uid)
    except NotLeader:
        raise
    except Exception as err:  # the eviction is done: a missing mark costs only the reason's name
        log.warning("could not mark GpuLease %s/%s as drained: %s", pod.namespace, pod.uid, err)


async def apply_drain(
    api: ClusterApi,
    plan: DrainPlan,
    raw: Mapping[str, Json],
    now: float,
    outcomes: Outcomes | None = None,
    contain: Containment | None = None,
) -> None:
    """`raw`: the pods' JSON by namespace/name (a notice patch and an event need the object);
    `outcomes` hears of each notice given and each eviction done (reason BudgetDrain);
    `contain`: one pod's failed write fails only that pod."""
    stamp = format_time(now)

    async def notice(item: NoticePod) -> None:
        given = await give_notice(api, raw[item.pod.key], item.pod, item.notice, item.message,
                                  stamp, annotation=names.ANN_DRAIN_NOTICE,
                                  reason="BudgetDrain")  # fmt: skip
        if given and outcomes is not None:
            outcomes.noticed("BudgetDrain")

    async def evict(eviction: EvictPod) -> None:
        pod = raw[eviction.pod.key]
        why = f"the budget of tenant {eviction.pod.tenant} is spent (drain)"
        if await evict_noticed(api, pod, eviction.pod, eviction.notice, stamp,
                               annotation=names.ANN_DRAIN_NOTICE, blocked_why=why):  # fmt: skip
            log.warning("evicted %s: %s", eviction.pod.key, eviction.message)
            await _mark_lease(api, eviction, stamp)
            await api.event(pod, "BudgetDrained", eviction.message, warning=True,
                            now_rfc3339=stamp)  # fmt: skip
            if outcomes is not None:
                outcomes.evicted("BudgetDrain")

    async def withdraw(withdrawal: WithdrawNotice) -> None:
        view = withdrawal.pod
        patch = withdraw_patch(view.uid, names.ANN_DRAIN_NOTICE)
        if await api.patch_pod(view.namespace, view.name, patch, json_patch=True):
            log.info("drain notice on %s withdrawn", view.key)
            await api.event(raw[view.key], "DrainWithdrawn", withdrawal.message,
                            now_rfc3339=stamp)  # fmt: skip

    for item in plan.notices:
        await run_one(contain, "drain", "Pod", raw[item.pod.key], partial(notice, item), now)
    for eviction in plan.evictions:
        await run_one(contain, "drain", "Pod", raw[eviction.pod.key], partial(evict, eviction),
                      now)  # fmt: skip
    for withdrawal in plan.withdrawals:
        await run_one(contain, "drain", "Pod", raw[withdrawal.pod.key],
                      partial(withdraw, withdrawal), now)  # fmt: skip
