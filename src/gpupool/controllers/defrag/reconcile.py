"""Live defragmentation, applied: `DefragReconciler` reads the GpuPools and, when one
defragments or a mark stands, the pods, GpuLeases, Nodes, GpuNodes and PodDisruptionBudgets; asks
the pure `defrag.plan.plan_defrag_round`; and writes it: the pools' `Defragmentation` condition
and `status.defrag`, marks on GpuNodes (annotation `gpupool.io/defrag`), and through the one
notices writer (`notices.write`): notices (`gpupool.io/defrag-notice` + event), evictions through
the Eviction API (a 429 is written into the notice once and retried every round) with the room
hold on the evicted pod's GpuLease when a waiting pod is named, and withdrawals; released marks,
with an event on the GpuPool for each round and release.

A write the API server refuses fails only its object (`controllers.contain`: set aside with a
ReconcileFailed event, retried after its backoff; the next round plans again from what the API
server holds: marks, notices and deadlines live there): a pool's condition, a mark's release, a
pool's round record, a node's mark, a pod's notice, eviction or withdrawal. A round whose record
could not be written gives none of its marks and notices (a round not recorded would be planned
again), and a mark that could not be written none of the notices for its node's pods (a card is
closed to new pods before its pods are asked to leave). The plan itself is still made over
every pool at once: one that raises fails the round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

from gpupool.adapters.kubernetes.decoded import reference
from gpupool.adapters.metrics.defrag import DefragMetrics
from gpupool.adapters.wire import names
from gpupool.adapters.wire.defrag_mark import mark_annotation
from gpupool.controllers.contain import Containment
from gpupool.controllers.defrag.plan import (
    DefragRound,
    PoolCondition,
    ReleaseMark,
    Round,
    plan_defrag_round,
)
from gpupool.controllers.due import soonest
from gpupool.controllers.notices.plan import EvictPod, NoticePod, WithdrawNotice
from gpupool.controllers.notices.write import NoticeKind, write_notices
from gpupool.controllers.reads import read_leases
from gpupool.controllers.reclaim.room import Placement, build_placement
from gpupool.ports import Clock, DefragApi
from gpupool.rfc3339 import format_time
from gpupool.state.defrag import DisruptionBudget
from gpupool.state.lease import ReclaimRecord, RoomHold
from gpupool.state.lease_writes import EvictionMark
from gpupool.state.listed import Listed, ObjectReference
from gpupool.state.nodes import DefragMark, GpuNodeObject
from gpupool.state.pods import PodView
from gpupool.state.pool import PoolObject
from gpupool.state.status_writes import NO_STATUS, Condition, DefragRecord, PoolStatusWrite

log = logging.getLogger("gpupool.controller.defrag")

LOOP = "defrag"

CONDITION = "Defragmentation"
BUSY_S = 5.0  # while defragmenting, a round at least this often


def _pool_ref(name: str) -> ObjectReference:
    """What an event on a GpuPool names (cluster-scoped: the event lives in `default`)."""
    return reference("GpuPool", name)


def _condition(c: PoolCondition, stamp: str, old: Condition | None) -> Condition:
    status = "True" if c.ok else "False"
    same = (
        old is not None
        and old.status == status
        and old.reason == c.reason
        and old.last_transition_time is not None
    )
    return Condition(
        type=CONDITION,
        status=status,
        reason=c.reason,
        message=c.message[:1024],
        last_transition_time=old.last_transition_time if same and old else stamp,
        observed_generation=c.generation,
    )


def hold_record(eviction: EvictPod, now: float) -> EvictionMark | None:
    """The room hold on the evicted pod's GpuLease (`status.reclaim`), when a waiting pod is
    named: the extender then keeps the cleared card for it (`extender_http.room_hold`)."""
    notice = eviction.notice
    if eviction.hold_until is None:
        return None
    hold = RoomHold(notice.room or "", notice.claimant_pod, eviction.claimant_uid or "",
                    eviction.hold_until)  # fmt: skip
    return EvictionMark(ReclaimRecord(now, "Defragmentation", eviction.message), hold)


# Defragmentation's notices: the annotation `gpupool.io/defrag-notice` (its `room` is the node
# the pod leaves, `claimant` the GpuPool); an eviction records the room hold, if any.
DEFRAG = NoticeKind(
    step="defrag",
    annotation=names.ANN_DEFRAG_NOTICE,
    noticed="DefragNotice",
    evicted="DefragMoved",
    withdrawn="DefragWithdrawn",
    purpose=lambda eviction: f"defragmentation of GpuPool {eviction.notice.claimant}",
    lease_record=hold_record,
    unmarked="the cleared card is not held for the waiting pod",
)


@dataclass(frozen=True, slots=True)
class DefragTally:
    """The notices' outcomes to the defragmentation metrics, by GpuPool (the notice's claimant)."""

    metrics: DefragMetrics

    def noticed(self, item: NoticePod) -> None:
        self.metrics.move(item.notice.claimant, "noticed")

    def evicted(self, item: EvictPod) -> None:
        self.metrics.move(item.notice.claimant, "evicted")

    def blocked(self, item: EvictPod) -> None:
        self.metrics.move(item.notice.claimant, "blocked")

    def withdrawn(self, item: WithdrawNotice) -> None:
        if item.pod.defrag_notice is not None:
            self.metrics.move(item.pod.defrag_notice.claimant, "withdrawn")


@dataclass(frozen=True, slots=True)
class LiveState:
    """One read of what a defragmentation round decides over, decoded once."""

    placement: Placement
    pods: list[PodView]
    pod_refs: dict[str, ObjectReference]
    budgets: list[DisruptionBudget]
    held_nodes: frozenset[str]  # nodes where a room hold stands now
    closable: frozenset[str]  # nodes with a GpuNode to carry a mark


async def read_live(api: DefragApi, gpunodes: list[GpuNodeObject], now: float) -> LiveState:
    """Nodes, GpuLeases, tenant pods and PodDisruptionBudgets, with the GpuNodes already read,
    into the extender's snapshot (`reclaim.room.build_placement`) and the pods' views (what does
    not decode is left out: the other loops set it aside and say so)."""
    nodes = (await api.nodes()).values
    leases = read_leases(await api.leases(), log)
    listed = await api.tenant_pods()
    pods = listed.values
    budgets = (await api.disruption_budgets()).values
    holders = {p.uid for p in pods if p.holds_quota}
    held = frozenset(
        le.room_hold.node for le in leases if le.room_hold is not None and le.room_hold.until > now
    )
    return LiveState(
        build_placement(nodes, gpunodes, leases, holders),
        pods,
        {v.key: ref for v, ref in listed.read},
        budgets,
        held,
        frozenset(g.name for g in gpunodes),
    )


class DefragReconciler:
    def __init__(
        self,
        api: DefragApi,
        clock: Clock,
        metrics: DefragMetrics | None = None,
        *,
        busy_s: float = BUSY_S,
        contain: Containment | None = None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.metrics = metrics
        self.busy_s = busy_s
        self.contain = contain if contain is not None else Containment(LOOP, api)
        self._active_at: float | None = 0.0  # the last active round (wall); at first: due
        self._round_at = 0.0  # when the last round began (wall)

    def due_at(self) -> float | None:
        """While a pool defragments or a mark stands, `busy_s` after the last round (notices'
        deadlines, evictions retried, marks released); none else (a GpuPool, GpuNode or PDB
        change wakes the loop); and an object set aside, when it is retried."""
        busy = None if self._active_at is None else self._active_at + self.busy_s
        return soonest(busy, self.contain.next_retry(self._round_at))

    async def reconcile(self) -> DefragRound:
        now = self._round_at = self.clock()
        try:
            return await self._reconcile(now)
        finally:
            await self.contain.report(now)

    async def _reconcile(self, now: float) -> DefragRound:
        pool_objs = await self.api.gpu_pools()
        pools = pool_objs.values
        gpunodes = (await self.api.gpu_nodes()).values
        marks = {g.name: g.defrag for g in gpunodes if g.defrag is not None}
        self._active_at = now if marks or any(p.defrag is not None for p in pools) else None
        if self._active_at is None:
            plan = plan_defrag_round(pools, build_placement([], [], []), [], [], {}, now)
            await self._conditions(plan, pool_objs, now)
            return plan
        live = await read_live(self.api, gpunodes, now)
        plan = plan_defrag_round(
            pools,
            live.placement,
            live.pods,
            live.budgets,
            marks,
            now,
            live.held_nodes,
            live.closable,
        )
        await self._apply(plan, pool_objs, live.pod_refs, now)
        return plan

    async def _conditions(
        self, plan: DefragRound, pool_objs: Listed[PoolObject], now: float
    ) -> None:
        stamp = format_time(now)
        by_name = {p.name: ref for p, ref in pool_objs.read}
        for c in plan.conditions:
            ref = by_name.get(c.pool)
            status = pool_objs.status_of(ref.key) if ref is not None else NO_STATUS
            old = status.condition(CONDITION)
            new = _condition(c, stamp, old)
            if old == new:
                continue
            conditions = (*status.others(CONDITION), new)
            work = partial(self._condition, c, conditions, stamp)
            await self.contain.handle("condition", ref or _pool_ref(c.pool), work, now)

    async def _condition(
        self, c: PoolCondition, conditions: tuple[Condition, ...], stamp: str
    ) -> None:
        await self.api.patch_gpu_pool_status(c.pool, PoolStatusWrite(conditions=conditions))
        if not c.ok and c.reason == "InvalidSpec":
            await self.api.event(
                _pool_ref(c.pool), "InvalidDefragSpec", c.message, warning=True,
                now_rfc3339=stamp,
            )  # fmt: skip

    async def _apply(
        self,
        plan: DefragRound,
        pool_objs: Listed[PoolObject],
        refs: dict[str, ObjectReference],
        now: float,
    ) -> None:
        stamp = format_time(now)
        await self._conditions(plan, pool_objs, now)
        m = self.metrics
        contain = self.contain
        for release in plan.releases:
            work = partial(self._release, release, stamp)
            await contain.handle("release", reference("GpuNode", release.node), work, now)
        unrecorded: set[str] = set()  # pools whose round could not be recorded
        for rnd in plan.rounds:
            work = partial(self._record, rnd, stamp)
            if not await contain.handle("round", _pool_ref(rnd.pool), work, now):
                unrecorded.add(rnd.pool)
        unmarked: set[str] = set()  # nodes whose mark could not be written
        for mark in plan.marks:
            if mark.mark.pool in unrecorded:
                continue
            write = partial(self.api.annotate_gpu_node, mark.node, names.ANN_DEFRAG_MARK,
                            mark_annotation(mark.mark))  # fmt: skip
            if not await contain.handle("mark", reference("GpuNode", mark.node), write, now):
                unmarked.add(mark.node)
        notices = [
            n
            for n in plan.notices
            if n.notice.claimant not in unrecorded and n.pod.node not in unmarked
        ]
        await write_notices(
            self.api,
            DEFRAG,
            refs,
            now,
            notices=notices,
            evictions=plan.evictions,
            withdrawals=plan.withdrawals,
            tally=DefragTally(m) if m is not None else None,
            contain=contain,
        )
        if m is not None:
            m.marked_cards(plan.marked_cards)

    async def _release(self, release: ReleaseMark, stamp: str) -> None:
        if await self.api.annotate_gpu_node(release.node, names.ANN_DEFRAG_MARK, None):
            log.info("defrag mark on %s released: %s", release.node, release.why)
            await self.api.event(
                _pool_ref(release.mark.pool),
                "DefragReleased",
                f"node {release.node} GPU {list(release.mark.gpus)}: {release.why}",
                now_rfc3339=stamp,
            )
            if self.metrics is not None:
                self.metrics.release(release.mark.pool, release.kind)

    async def _record(self, rnd: Round, stamp: str) -> None:
        """The pool's last round (`status.defrag`), its metric and, when it moves pods, its
        event."""
        last = DefragRecord(
            last_round=stamp,
            moves=len(rnd.plan.moves),
            cleared=len(rnd.plan.cleared),
            fragmentation_before=f"{100 * rnd.plan.pool_before:.1f}%",
            fragmentation_after=f"{100 * rnd.plan.pool_after:.1f}%",
        )
        await self.api.patch_gpu_pool_status(rnd.pool, PoolStatusWrite(defrag=last))
        if self.metrics is not None:
            self.metrics.round(rnd.pool)
        if rnd.plan.moves:
            log.warning("GpuPool %s: %s", rnd.pool, rnd.message)
            await self.api.event(_pool_ref(rnd.pool), "DefragRound", rnd.message, now_rfc3339=stamp)


__all__ = ["CONDITION", "DefragMark", "DefragReconciler", "LiveState", "read_live"]
