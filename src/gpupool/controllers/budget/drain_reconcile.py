"""`onExhaustion: drain`, applied: `BudgetDrainReconciler` takes the admission round (its pods,
GpuQuotas and budget standings), asks the pure `budget.drain.plan_drain` and writes it through
the one notices writer (`notices.write`, shared with reclaim, lease expiry and defragmentation):
the notice `gpupool.io/drain-notice` with a `BudgetDrain` event, the eviction through the
Eviction API (a PodDisruptionBudget's refusal retried every round) with a `BudgetDrained` event
and the mark on the pod's GpuLease (`status.reclaim`, reason `BudgetDrain`, so the lease ends
Released for that reason once the pod is gone), and withdrawals (`DrainWithdrawn`). A write that
fails sets that pod aside with a ReconcileFailed event and the others go on
(`controllers.contain`); the next round plans it again from the pods' annotations."""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.adapters.wire import names
from gpupool.controllers.admission.reconcile import LOOP, AdmissionRound
from gpupool.controllers.budget.drain import DrainPlan, plan_drain
from gpupool.controllers.contain import Containment
from gpupool.controllers.leases.plan import BUDGET_DRAIN
from gpupool.controllers.notices.plan import EvictPod
from gpupool.controllers.notices.write import NoticeKind, outcome_tally, write_notices
from gpupool.ports import ClusterApi, Outcomes
from gpupool.state.lease import ReclaimRecord
from gpupool.state.lease_writes import EvictionMark
from gpupool.state.listed import ObjectReference


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
                self.api, plan, admission.refs, admission.now, self.outcomes, self.contain
            )
        finally:
            await self.contain.report(admission.now)
        return plan


def drain_record(eviction: EvictPod, now: float) -> EvictionMark:
    """The evicted pod's GpuLease `status.reclaim`, so it ends for the drain (`leases.plan`)."""
    return EvictionMark(ReclaimRecord(now, BUDGET_DRAIN, eviction.message))


# Budget drain's notices: the annotation `gpupool.io/drain-notice`; the evicted pod's GpuLease is
# marked (`drain_record`) so it ends Released for the drain.
DRAIN = NoticeKind(
    step="drain",
    annotation=names.ANN_DRAIN_NOTICE,
    noticed="BudgetDrain",
    evicted="BudgetDrained",
    withdrawn="DrainWithdrawn",
    purpose=lambda eviction: f"the budget of tenant {eviction.pod.tenant} is spent (drain)",
    lease_record=drain_record,
    unmarked="its lease will end Released without the reason BudgetDrained",
)


async def apply_drain(
    api: ClusterApi,
    plan: DrainPlan,
    refs: Mapping[str, ObjectReference],
    now: float,
    outcomes: Outcomes | None = None,
    contain: Containment | None = None,
) -> None:
    """`refs`: the pods' references by namespace/name, as listed (an event names the pod);
    `outcomes` hears of each notice given and each eviction done (reason BudgetDrain);
    `contain`: one pod's failed write fails only that pod."""
    await write_notices(
        api,
        DRAIN,
        refs,
        now,
        notices=plan.notices,
        evictions=plan.evictions,
        withdrawals=plan.withdrawals,
        tally=outcome_tally(outcomes, lambda _notice: "BudgetDrain"),
        contain=contain,
    )
