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

from gpupool.adapters.kubernetes.decoded import read_gpu_node, read_node
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.controllers.admission.reconcile import LOOP, AdmissionRound
from gpupool.controllers.contain import Containment, run_one
from gpupool.controllers.reclaim.notices import (
    evict_noticed,
    give_notice,
    notice_patch,
    withdraw_patch,
)
from gpupool.controllers.reclaim.plan import (
    EndHold,
    EvictPod,
    NoticePod,
    ReclaimRound,
    WithdrawNotice,
    plan_reclaim_round,
)
from gpupool.controllers.reclaim.room import Placement, build_placement, waits_for_room
from gpupool.ports import ClusterApi, Json, Outcomes
from gpupool.rfc3339 import format_time
from gpupool.state.notice import ReclaimNotice

log = logging.getLogger("gpupool.controller.reclaim")

__all__ = ["ReclaimReconciler", "apply_reclaim", "notice_patch", "reclaim_record", "withdraw_patch"]


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
        if any(waits_for_room(v) for v in views):  # nodes are read only when a pod needs room
            nodes = [read_node(n) for n in await self.api.nodes()]
            gpunodes = [read_gpu_node(n) for n in await self.api.gpu_nodes()]
            holders = {v.uid for v in views if v.holds_quota}
            placement = build_placement(nodes, gpunodes, admission.leases, holders)
        now = admission.now
        holds = {le.key: le.room_hold for le in admission.leases if le.room_hold is not None}
        plan = plan_reclaim_round(admission.plan, views, now, placement=placement, holds=holds)
        try:
            await apply_reclaim(self.api, plan, admission.raw, now, self.outcomes, self.contain)
        finally:
            await self.contain.report(now)
        return plan


def reclaim_reason(notice: ReclaimNotice) -> str:
    return "RoomReclaim" if notice.room is not None else "QuotaReclaim"


def reclaim_record(eviction: EvictPod, stamp: str) -> Json:
    """The GpuLease's `status.reclaim` for a pod reclaim has evicted (`leases.plan` reads it)."""
    notice = eviction.notice
    reason = reclaim_reason(notice)
    record: Json = {"at": stamp, "reason": reason, "message": eviction.message[:1024]}
    if notice.room is not None and eviction.claimant_uid and eviction.hold_until is not None:
        record |= {
            "room": notice.room,
            "for": notice.claimant_pod,
            "forUid": eviction.claimant_uid,
            "holdUntil": format_time(eviction.hold_until),
        }
    return record


async def _record_eviction(api: ClusterApi, eviction: EvictPod, stamp: str) -> None:
    """Mark the evicted pod's GpuLease (named after the pod's uid, in its namespace), so that it
    ends as Reclaimed rather than Released once the pod is gone; it keeps holding its slices
    until then. Best effort: without the mark the lease is released as for any pod that goes."""
    pod = eviction.pod
    lost = f"its lease will end as Released, not Reclaimed, once {pod.key} is gone"
    if not pod.uid:
        log.warning("evicted %s has no uid: %s", pod.key, lost)
        return
    status = {"reclaim": reclaim_record(eviction, stamp)}
    try:
        recorded = await api.patch_lease_status(pod.namespace, pod.uid, status)
    except NotLeader:
        raise
    except Exception as err:  # the eviction is done: a missing mark costs only the phase's name
        log.warning("could not mark GpuLease %s/%s as evicted (%s): %s", pod.namespace, pod.uid,
                    err, lost)  # fmt: skip
        return
    if not recorded:
        log.warning("no GpuLease %s/%s to mark as evicted: %s", pod.namespace, pod.uid, lost)


async def apply_reclaim(
    api: ClusterApi,
    plan: ReclaimRound,
    raw: Mapping[str, Json],
    now: float,
    outcomes: Outcomes | None = None,
    contain: Containment | None = None,
) -> None:
    """Write one round's plan: notices (annotation + event), evictions (each evicted pod's
    GpuLease gets `status.reclaim`, with the room hold for room), withdrawals, ended holds;
    `outcomes` hears of each notice given and each eviction done; `contain`: one pod's or
    lease's failed write fails only that object."""
    stamp = format_time(now)

    async def notice(item: NoticePod) -> None:
        given = await give_notice(
            api, raw[item.pod.key], item.pod, item.notice, item.message, stamp
        )
        if given and outcomes is not None:
            outcomes.noticed(reclaim_reason(item.notice))

    async def evict(eviction: EvictPod) -> None:
        pod = raw[eviction.pod.key]
        why = f"reclaim for tenant {eviction.notice.claimant}"
        if await evict_noticed(api, pod, eviction.pod, eviction.notice, stamp, blocked_why=why):
            log.warning("evicted %s: %s", eviction.pod.key, eviction.message)
            await _record_eviction(api, eviction, stamp)
            if outcomes is not None:
                outcomes.evicted(reclaim_reason(eviction.notice))
            await api.event(pod, "Reclaimed", eviction.message, warning=True, now_rfc3339=stamp)

    async def withdraw(withdrawal: WithdrawNotice) -> None:
        pod = raw[withdrawal.pod.key]
        if await api.patch_pod(
            withdrawal.pod.namespace,
            withdrawal.pod.name,
            withdraw_patch(withdrawal.pod.uid),
            json_patch=True,
        ):
            log.info("reclaim notice on %s withdrawn", withdrawal.pod.key)
            await api.event(pod, "ReclaimWithdrawn", withdrawal.message, now_rfc3339=stamp)

    async def end_hold(end: EndHold) -> None:
        namespace, _, name = end.lease_key.partition("/")
        if await api.patch_lease_status(namespace, name, {"reclaim": {"holdUntil": None}}):
            log.info("room hold on GpuLease %s ended: %s", end.lease_key, end.message)

    for item in plan.notices:
        await run_one(contain, "reclaim", "Pod", raw[item.pod.key], partial(notice, item), now)
    for eviction in plan.evictions:
        await run_one(contain, "reclaim", "Pod", raw[eviction.pod.key], partial(evict, eviction),
                      now)  # fmt: skip
    for withdrawal in plan.withdrawals:
        await run_one(contain, "reclaim", "Pod", raw[withdrawal.pod.key],
                      partial(withdraw, withdrawal), now)  # fmt: skip
    for end in plan.ended_holds:
        namespace, _, name = end.lease_key.partition("/")
        ref = {"metadata": {"name": name, "namespace": namespace}}
        await run_one(contain, "reclaim", "GpuLease", ref, partial(end_hold, end), now)
