"""One round of live defragmentation, pure: over the GpuPools, the extender's snapshot (nodes,
GpuNodes with their marks, GpuLeases), the tenant pods and the PodDisruptionBudgets, what to
mark, notice, evict, hold and release.

A GpuPool defragments when `spec.defrag.enabled`; settings that cannot be used (its
`any_problem`) give the pool a False `Defragmentation` condition and nothing of it moves. For an
enabled pool:
- **A new round** starts when the pool has no card marked and `intervalSeconds` have passed
  since the last (`status.defrag.lastRound`). The placement core's planner
  (`placement.defrag.plan_defrag`) chooses over the pool's cards: lowest priority first, never an
  exclusive pod, never more than a PodDisruptionBudget allows now, a pod without an owner only
  with `moveOrphans`, at most `maxMoves`; a card is fixed with the fewest moves. Each card it
  fixes gets a **mark** (the GpuNode
  annotation `gpupool.io/defrag`, until now + `timeoutSeconds`): the extender's filter refuses
  new slices there, with the reason. Each pod to move gets a **notice**
  (`gpupool.io/defrag-notice`, the reclaim notice's JSON: the eviction time is on the pod, so a
  restarted controller carries on) and an event.
- **The room is held** for the waiting large request: the highest-priority pod that waits for
  room (`reclaim.room.waits_for_room`) and fits the fixed card once the moves are done is named
  in the notices (`for`), and each eviction from the card records the room hold the extender honours
  (`status.reclaim` on the victim's GpuLease, as reclaim for room does).
- Once a notice's buffer time is over, the pod is **evicted through the Eviction API**; a refusal
  (429: a PodDisruptionBudget) is written into the notice once and retried every round.
- **A mark is released** when the pods it moved are gone (cleared), when the round times
  out (its remaining notices are withdrawn: the pods stay), or when the pool no longer
  defragments.
Nothing here reads a clock or the API server.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpupool.controllers.notices.plan import (
    EvictPod,
    NoticePod,
    WithdrawNotice,
    new_notice,
    settle,
)
from gpupool.controllers.reclaim.plan import ROOM_HOLD_S
from gpupool.controllers.reclaim.room import Placement, waits_for_room
from gpupool.domain.units import format_bytes
from gpupool.placement.defrag import DefragPlan, DefragRules, Move, plan_defrag
from gpupool.placement.filters import feasibility
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot
from gpupool.rfc3339 import format_time
from gpupool.state.defrag import DisruptionBudget, common_sizes, residents_of
from gpupool.state.nodes import DefragMark
from gpupool.state.pods import PodView
from gpupool.state.pool import PoolObject


@dataclass(frozen=True, slots=True)
class PoolCondition:
    pool: str
    generation: int
    ok: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class SetMark:
    node: str
    mark: DefragMark


@dataclass(frozen=True, slots=True)
class ReleaseMark:
    node: str
    mark: DefragMark
    why: str
    kind: str  # cleared | timeout | disabled (the metric's label)


@dataclass(frozen=True, slots=True)
class Round:
    """A round planned for `pool` now: the planner's answer and who the room is held for."""

    pool: str
    plan: DefragPlan
    held_for: Mapping[tuple[str, int], str]  # cleared card -> the waiting pod's key
    message: str


@dataclass(frozen=True, slots=True)
class DefragRound:
    conditions: tuple[PoolCondition, ...] = ()
    rounds: tuple[Round, ...] = ()
    marks: tuple[SetMark, ...] = ()
    releases: tuple[ReleaseMark, ...] = ()
    notices: tuple[NoticePod, ...] = ()
    evictions: tuple[EvictPod, ...] = ()
    withdrawals: tuple[WithdrawNotice, ...] = ()
    marked_cards: Mapping[str, int] = field(default_factory=dict)  # pool -> cards marked now


def pool_scope(
    snap: ClusterSnapshot,
    pool: PoolObject,
    placement: Placement,
    closable: Collection[str] | None = None,
) -> BoolArray:
    """The cards of the pool: on nodes its selector takes, of the models it lists (all: none);
    with `closable`, only on those nodes (the ones with a GpuNode to carry the mark)."""
    scope = snap.present.copy()
    for i, name in enumerate(snap.names):
        node = placement.nodes.get(name)
        if (
            node is None
            or not pool.covers_node(node.labels)
            or (closable is not None and name not in closable)
        ):
            scope[i, :] = False
    if pool.models:
        ids = [snap.model_ids[m] for m in pool.models if m in snap.model_ids]
        scope &= np.isin(snap.model_id, ids)
    return scope


def _lease_cards(placement: Placement) -> set[tuple[str, int]]:
    """(node, GPU index) of every card some lease holds capacity on."""
    snap = placement.snap
    out: set[tuple[str, int]] = set()
    for d in placement.decisions.values():
        gpus = snap.nodes[d.node_index].gpus
        out.update((d.node, gpus[slot].index) for slot in d.cards)
    return out


def _hold_for(
    placement: Placement, plan: DefragPlan, waiting: Sequence[PodView]
) -> dict[tuple[str, int], str]:
    """Cleared card (node, slot) -> the waiting pod it is held for: in priority order, the first
    pod whose request fits the card once every move is done (exact what-if on the snapshot,
    undone before returning)."""
    snap = placement.snap
    if not plan.cleared or not waiting:
        return {}
    for m in plan.moves:
        snap.forget(m.source)
        snap.assume(m.target)
    try:
        out: dict[tuple[str, int], str] = {}
        taken: set[str] = set()
        for node, slot in plan.cleared:
            i = snap.index[node]
            for pod in waiting:
                if pod.key in taken or pod.request is None or pod.request.gpu_count != 1:
                    continue
                if bool(feasibility(snap, pod.request).card_fit[i, slot]):
                    out[(node, slot)] = pod.key
                    taken.add(pod.key)
                    break
        return out
    finally:
        for m in reversed(plan.moves):
            snap.forget(m.target)
            snap.assume(m.source)


def rules_of(pool: PoolObject) -> DefragRules:
    assert pool.defrag is not None
    d = pool.defrag
    return DefragRules(float(pool.threshold_pct), d.max_moves, d.move_orphans)


def plan_one(
    pool: PoolObject | None,
    rules: DefragRules,
    placement: Placement,
    pods: Sequence[PodView],
    budgets: Sequence[DisruptionBudget],
    skip_nodes: Collection[str] = (),
    closable: Collection[str] | None = None,
) -> Round:
    """One round's moves over the pool's cards (`pool` None: every card) with `rules`, and who
    each cleared card is held for: what the loop would start now (`gpupool defrag plan` on a
    live cluster prints it)."""
    residents, allowed = residents_of(pods, placement.decisions, budgets, skip_nodes=skip_nodes)
    snap = placement.snap
    scope = None if pool is None else pool_scope(snap, pool, placement, closable)
    plan = plan_defrag(snap, residents, common_sizes(pods), rules, allowed, scope)
    waiting = sorted(
        (p for p in pods if waits_for_room(p)),
        key=lambda p: (-p.priority, p.admitted.at if p.admitted else 0.0, p.key),
    )
    held_for = _hold_for(placement, plan, waiting)
    message = (
        f"defragmentation round (threshold {rules.threshold_pct:g}%): {len(plan.moves)} moves "
        f"fix {len(plan.cleared)} cards; pool fragmentation {100 * plan.pool_before:.1f}% -> "
        f"{100 * plan.pool_after:.1f}%"
    )
    if held_for:
        message += "; room held for " + ", ".join(sorted(set(held_for.values())))
    return Round(pool.name if pool is not None else "", plan, held_for, message)


def plan_defrag_round(
    pools: Sequence[PoolObject],
    placement: Placement,
    pods: Sequence[PodView],
    budgets: Sequence[DisruptionBudget],
    marks: Mapping[str, DefragMark],
    now: float,
    held_nodes: Collection[str] = (),
    closable: Collection[str] | None = None,
) -> DefragRound:
    """This round's writes (pure; see the module). `marks`: node -> its GpuNode's mark;
    `held_nodes`: nodes where a room hold stands (their slices stay where they are);
    `closable`: the nodes with a GpuNode, which can carry a mark (None: all)."""
    by_name = {p.name: p for p in pools}
    releases, standing = settle_marks(marks, by_name, placement, pods, now)
    by_key = {p.key: p for p in pods}
    evictions: list[EvictPod] = []
    withdrawals: list[WithdrawNotice] = []
    for pod in pods:
        outcome = settle_defrag_notice(pod, standing, by_key, now)
        if isinstance(outcome, WithdrawNotice):
            withdrawals.append(outcome)
        elif outcome is not None:
            evictions.append(outcome)
    rounds: list[Round] = []
    new_marks: list[SetMark] = []
    notices: list[NoticePod] = []
    busy = {m.pool for m in standing.values()}
    for pool in pools:
        if not round_is_due(pool, busy, now):
            continue
        keep = set(standing) | set(held_nodes)
        rnd = plan_one(pool, rules_of(pool), placement, pods, budgets, keep, closable)
        rounds.append(rnd)
        for set_mark in round_marks(pool, rnd, placement, now):
            new_marks.append(set_mark)
            standing[set_mark.node] = set_mark.mark
        notices.extend(
            move_notice(pool, rnd, move, by_key[move.resident], now) for move in rnd.plan.moves
        )
    return DefragRound(
        marked_cards=marked_cards(pools, standing.values()),
        conditions=tuple(pool_condition(pool) for pool in pools),
        rounds=tuple(rounds),
        marks=tuple(new_marks),
        releases=tuple(releases),
        notices=tuple(notices),
        evictions=tuple(evictions),
        withdrawals=tuple(withdrawals),
    )


def pool_condition(pool: PoolObject) -> PoolCondition:
    """The GpuPool's `Defragmentation` condition: invalid spec, disabled or enabled."""
    if pool.any_problem is not None:
        return PoolCondition(pool.name, pool.generation, False, "InvalidSpec", pool.any_problem)
    d = pool.defrag
    if d is None:
        why = "spec.defrag.enabled is not true: nothing is moved"
        return PoolCondition(pool.name, pool.generation, False, "Disabled", why)
    return PoolCondition(
        pool.name,
        pool.generation,
        True,
        "Enabled",
        f"cards above {pool.threshold_pct}% fragmentation are cleared, a "
        f"round at most every {d.interval_s:g}s",
    )


def settle_marks(
    marks: Mapping[str, DefragMark],
    by_name: Mapping[str, PoolObject],
    placement: Placement,
    pods: Sequence[PodView],
    now: float,
) -> tuple[list[ReleaseMark], dict[str, DefragMark]]:
    """The marks to release (their pool no longer defragments, their round timed out, or the
    pods they moved are gone), and those still in force (node -> mark)."""
    held = _lease_cards(placement)
    moving = {  # nodes with a pod still to move off them (or still terminating after it)
        p.defrag_notice.room for p in pods if p.defrag_notice is not None and not p.terminal
    }
    releases: list[ReleaseMark] = []
    standing: dict[str, DefragMark] = {}
    for node, mark in sorted(marks.items()):
        owner = by_name.get(mark.pool)
        if owner is None or owner.defrag is None:
            why = f"GpuPool {mark.pool} no longer defragments"
            releases.append(ReleaseMark(node, mark, why, "disabled"))
        elif now >= mark.until:
            why = "the round timed out before its cards were fixed; the pods still on them stay"
            releases.append(ReleaseMark(node, mark, why, "timeout"))
        elif node not in moving or not any((node, g) in held for g in mark.gpus):
            why = "the pods it moved are gone: its cards take new slices again"
            releases.append(ReleaseMark(node, mark, why, "cleared"))
        else:
            standing[node] = mark
    return releases, standing


def settle_defrag_notice(
    pod: PodView,
    standing: Mapping[str, DefragMark],
    by_key: Mapping[str, PodView],
    now: float,
) -> EvictPod | WithdrawNotice | None:
    """A running pod's defragmentation notice this round: withdrawn once its node's mark is no
    longer in force (`standing`), the pod evicted once its buffer is over (the room held for the
    pod it was cleared for, while that pod waits for room), else None."""
    notice = pod.defrag_notice
    if notice is None or pod.terminal or pod.deleting or pod.node is None:
        return None
    withdraw = (
        None
        if notice.room in standing
        else f"the defragmentation round on node {notice.room} is over; the pod stays"
    )
    claimant = by_key.get(notice.claimant_pod) if notice.claimant_pod else None
    hold_uid = ""
    hold_until: float | None = None
    if claimant is not None and waits_for_room(claimant) and claimant.uid:
        hold_uid, hold_until = claimant.uid, now + ROOM_HOLD_S
    why = f"moved off node {notice.room} by defragmentation (GpuPool {notice.claimant})"
    if notice.claimant_pod:
        why += f"; the room is held for pod {notice.claimant_pod}"
    return settle(
        pod,
        notice,
        now,
        withdraw=withdraw,
        evicted=why,
        claimant_uid=hold_uid,
        hold_until=hold_until,
    )


def round_is_due(pool: PoolObject, busy: Collection[str], now: float) -> bool:
    """A new round for `pool`: it defragments, its spec is valid, no mark of its own stands
    (`busy`: the pools with one) and its interval has passed since its last round."""
    d = pool.defrag
    if d is None or pool.any_problem is not None or pool.name in busy:
        return False
    return pool.last_round is None or now - pool.last_round >= d.interval_s


def round_marks(pool: PoolObject, rnd: Round, placement: Placement, now: float) -> list[SetMark]:
    """The marks of the cards `rnd` clears, one per node, until now + the pool's timeout."""
    assert pool.defrag is not None
    snap = placement.snap
    gpus_of: dict[str, list[int]] = {}
    for node, slot in rnd.plan.cleared:
        gpus_of.setdefault(node, []).append(snap.nodes[snap.index[node]].gpus[slot].index)
    until = now + pool.defrag.timeout_s
    return [
        SetMark(node, DefragMark(pool.name, now, until, tuple(sorted(gpus))))
        for node, gpus in sorted(gpus_of.items())
    ]


def move_notice(pool: PoolObject, rnd: Round, move: Move, pod: PodView, now: float) -> NoticePod:
    """The notice on the pod `move` takes off its card (its node is the notice's `room`)."""
    assert pool.defrag is not None
    notice_s = pool.defrag.notice_s
    src_node, src_slot = move.source_card
    held_for = rnd.held_for.get((src_node, src_slot), "")
    notice = new_notice(now, notice_s, pool.name, held_for, room=src_node)
    dst_node, dst_slot = move.target_card
    message = (
        f"defragmentation (GpuPool {pool.name}) moves this pod off GPU slot {src_slot} "
        f"of node {src_node} ({format_bytes(move.source.mem_bytes[0])}, priority "
        f"{move.priority}): the card is above {pool.threshold_pct}% fragmentation; evicted "
        f"at {format_time(now + notice_s)} (buffer {notice_s:g}s), its owner "
        f"recreates it (room for it e.g. on {dst_node} slot {dst_slot})"
    )
    if held_for:
        message += f"; the card is then held for pod {held_for}"
    return NoticePod(pod, notice, message)


def marked_cards(pools: Sequence[PoolObject], standing: Iterable[DefragMark]) -> dict[str, int]:
    """How many cards each pool's marks in force close (every pool listed, 0 without)."""
    marked: dict[str, int] = {p.name: 0 for p in pools}
    for mark in standing:
        marked[mark.pool] = marked.get(mark.pool, 0) + len(mark.gpus)
    return marked
