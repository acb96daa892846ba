"""Reclaim of borrowed quota, applied (DESIGN.md section 6): `ReclaimReconciler` takes the
admission round (its pods, GpuLeases, GpuQuotas and quota decision; when some pod waits for room
it also reads Nodes and GpuNodes), asks the pure `reclaim.plan.plan_reclaim_round` what to do,
and `apply_reclaim` writes it:
notices (annotation `gpupool.io/reclaim-notice` + event), evictions through the Eviction API
(PodDisruptionBudgets honoured; a 429 retried every round), the eviction record and room hold on
the victim's GpuLease (`status.reclaim`), withdrawals and ended holds. See `reclaim.plan` for the
rules. A write that fails sets that pod (or lease) aside with a ReconcileFailed event and the
others go on (`controllers.contain`); the next round plans it again once its backoff is over
(notices and deadlines are kept on the pods, so nothing is lost).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from gpupool.adapters.wire import names
from gpupool.controllers.admission.reconcile import LOOP, AdmissionRound
from gpupool.controllers.contain import Containment, lease_ref, run_one
from gpupool.controllers.notices.plan import EvictPod
from gpupool.controllers.notices.write import NoticeKind, outcome_tally, write_notices
from gpupool.controllers.reclaim.plan import EndHold, ReclaimRound, plan_reclaim_round
from gpupool.controllers.reclaim.room import Placement, build_placement, may_claim_room
from gpupool.ports import ClusterApi, Outcomes
from gpupool.state.lease import ReclaimRecord, RoomHold
from gpupool.state.lease_writes import EvictionMark
from gpupool.state.listed import ObjectReference
from gpupool.state.notice import ReclaimNotice

log = logging.getLogger("gpupool.controller.reclaim")

__all__ = ["RECLAIM", "ReclaimReconciler", "apply_reclaim", "reclaim_record"]


class ReclaimReconciler:
    """Runs after the admission round, over its reads and its plan (`AdmissionRound`)."""

    def __init__(
        self,
        api: ClusterApi,
        outcomes: Outcomes | None = None,
        contain: Containment | None = None,
    ) -> None:
        self.api = api
        self.outcomes = outcomes
        self.contain = contain if contain is not None else Containment(LOOP, api)

    async def reconcile(self, admission: AdmissionRound) -> ReclaimRound:
        views = admission.pods
        placement: Placement | None = None
        cohorts = {q.name: q.cohort for q in admission.quotas}
        if any(may_claim_room(v, cohorts) for v in views):  # nodes read only when of use
            # what does not decode is left out: the admission loop sets it aside and says so
            nodes = (await self.api.nodes()).values
            gpunodes = (await self.api.gpu_nodes()).values
            holders = {v.uid for v in views if v.holds_quota}
            placement = build_placement(nodes, gpunodes, admission.leases, holders)
        now = admission.now
        holds = {le.key: le.room_hold for le in admission.leases if le.room_hold is not None}
        plan = plan_reclaim_round(admission.plan, views, now, placement=placement, holds=holds)
        try:
            await apply_reclaim(self.api, plan, admission.refs, now, self.outcomes, self.contain)
        finally:
            await self.contain.report(now)
        return plan


def reclaim_reason(notice: ReclaimNotice) -> str:
    return "RoomReclaim" if notice.room is not None else "QuotaReclaim"


def reclaim_record(eviction: EvictPod, now: float) -> EvictionMark:
    """The GpuLease's `status.reclaim` for a pod reclaim has evicted (`leases.plan` reads it),
    with the room hold when it was evicted for room."""
    notice = eviction.notice
    record = ReclaimRecord(now, reclaim_reason(notice), eviction.message)
    if notice.room is not None and eviction.claimant_uid and eviction.hold_until is not None:
        hold = RoomHold(notice.room, notice.claimant_pod, eviction.claimant_uid,
                        eviction.hold_until)  # fmt: skip
        return EvictionMark(record, hold)
    return EvictionMark(record)


# Reclaim's notices: the annotation `gpupool.io/reclaim-notice`; each evicted pod's GpuLease gets
# `status.reclaim` (`reclaim_record`), so it ends Reclaimed, with the room hold for room.
RECLAIM = NoticeKind(
    step="reclaim",
    annotation=names.ANN_RECLAIM_NOTICE,
    noticed="ReclaimNotice",
    evicted="Reclaimed",
    withdrawn="ReclaimWithdrawn",
    purpose=lambda eviction: f"reclaim for tenant {eviction.notice.claimant}",
    lease_record=reclaim_record,
    unmarked="its lease will end as Released, not Reclaimed",
)


async def apply_reclaim(
    api: ClusterApi,
    plan: ReclaimRound,
    refs: Mapping[str, ObjectReference],
    now: float,
    outcomes: Outcomes | None = None,
    contain: Containment | None = None,
) -> None:
    """Write one round's plan: notices (annotation + event), evictions (each evicted pod's
    GpuLease gets `status.reclaim`, with the room hold for room), withdrawals, ended holds;
    `outcomes` hears of each notice given and each eviction done; `contain`: one pod's or
    lease's failed write fails only that object."""
    await write_notices(
        api,
        RECLAIM,
        refs,
        now,
        notices=plan.notices,
        evictions=plan.evictions,
        withdrawals=plan.withdrawals,
        tally=outcome_tally(outcomes, reclaim_reason),
        contain=contain,
    )

    async def end_hold(end: EndHold) -> None:
        namespace, _, name = end.lease_key.partition("/")
        if await api.end_room_hold(namespace, name):
            log.info("room hold on GpuLease %s ended: %s", end.lease_key, end.message)

    for end in plan.ended_holds:
        namespace, _, name = end.lease_key.partition("/")
        await run_one(contain, "reclaim", lease_ref(name, namespace), partial(end_hold, end), now)
