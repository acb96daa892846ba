"""The defragmentation planner: pure, over a placement snapshot, with exact what-ifs.

A card whose fragmentation (`card_fragmentation`, the operators' figure) is above the threshold is
a *source*. The planner *fixes* a source with the fewest moves: its slices move off lowest
priority first (the larger first among equals) until the card's fragmentation is at or under the
threshold. Often one or two moves suffice (the freed memory takes a common size again); a card
whose free memory only whole-card requests would use must be emptied, and is. Sources are tried
lowest priority first (the highest priority among the slices that may move), then by how much
memory a move gives back (the card's fragmentation over its number of movable slices), so that a
bound on moves spends them where they recover most. A slice never moves if it is an exclusive
pod, spans several cards, or has no owner to recreate it (unless moving orphans is on); a slice
whose PodDisruptionBudget allows no more disruptions stays too (a budget named by a slice but
absent from `budgets` allows none), and so does one no card can take: the next slice is tried.

Each move is asked of the placement filters on the snapshot with the slice's own placement
forgotten (`feasibility`: model, health, cordons and defragmentation marks, CPU and memory of the
node, room on the card), then assumed, so the moves in order are feasible one after another and
never over-commit a card (`assume` refuses). A target must not be a source already fixed or being
fixed, and must end at or below the threshold — or, if it was above already, no higher than it
was: no move raises any card's fragmentation above the threshold. Nor is it an empty card: a
slice moved there would only move the hole, and use up a card that whole-card requests can take.
Among the targets that pass, the best fit (least free memory left, as a share of the card) wins,
which fills holes and leaves empty cards empty. If a source cannot get under the threshold, its
moves are undone and it is kept with the reason that stopped it. A card that received slices is
not fixed in the same round. The snapshot is left exactly as it was given (every what-if is
undone with `forget`/`assume`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpupool.placement.defrag.plan import DefragPlan, Move, Skip, SkipReason
from gpupool.placement.defrag.rules import DefragRules, Resident
from gpupool.placement.filters import Reason, feasibility
from gpupool.placement.fragmentation import (
    CommonSizes,
    card_fragmentation,
    pool_fragmentation,
    snapshot_fragmentation,
)
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, Decision

Card = tuple[int, int]  # (node index, slot)
Block = tuple[SkipReason, str | None] | None  # why a card is kept, and the slice that kept it
_EPS = 1e-9


def plan_defrag(
    snap: ClusterSnapshot,
    residents: Sequence[Resident],
    sizes: CommonSizes,
    rules: DefragRules,
    budgets: Mapping[str, int] | None = None,
    scope: BoolArray | None = None,
) -> DefragPlan:
    """The moves that clear the most fragmented memory with the fewest moves (see the module).
    `scope` (nodes × card slots): the cards of the pool being defragmented, the only sources
    and targets (None: every card)."""
    rnd = _Round(snap, sizes, rules, dict(budgets or {}))
    if scope is not None:
        rnd.closed |= ~scope
    return rnd.plan(residents, scope)


@dataclass
class _Round:
    snap: ClusterSnapshot
    sizes: CommonSizes
    rules: DefragRules
    budgets: dict[str, int]
    frag: np.ndarray = field(init=False)
    closed: BoolArray = field(init=False)  # cards no slice may move onto
    moves: list[Move] = field(default_factory=list)
    touched: dict[Card, float] = field(default_factory=dict)  # fragmentation before the round

    def __post_init__(self) -> None:
        self.frag = snapshot_fragmentation(self.snap, self.sizes)
        self.closed = np.zeros_like(self.snap.present)

    # -- the round ----------------------------------------------------------------------------
    def plan(self, residents: Sequence[Resident], scope: BoolArray | None = None) -> DefragPlan:
        snap = self.snap
        pool_before = pool_fragmentation(snap, self.sizes)
        on_card: dict[Card, list[Resident]] = {}
        for r in residents:
            for slot in r.decision.cards:
                on_card.setdefault((r.decision.node_index, slot), []).append(r)
        inside = snap.present if scope is None else snap.present & scope
        over = np.argwhere(inside & (self.frag > self.rules.threshold + _EPS))
        skipped: list[Skip] = []
        sources: list[tuple[tuple[int, float, int, int], Card, list[Resident], Block]] = []
        for i, slot in ((int(a), int(b)) for a, b in over):
            here = on_card.get((i, slot), [])
            if not here:
                skipped.append(self._skip((i, slot), SkipReason.STILL_FRAGMENTED, None))
                continue
            movable = [r for r in here if self._held_back(r) is None]
            held = self._first_held_back(here)
            if not movable:
                assert held is not None
                skipped.append(self._skip((i, slot), *held))
                continue
            key = (max(r.priority for r in movable), -self.frag[i, slot] / len(movable), i, slot)
            sources.append((key, (i, slot), movable, held))
        sources.sort(key=lambda s: s[0])
        cleared: list[Card] = []
        receivers: set[Card] = set()
        for _, card, movable, held in sources:
            if self.frag[card] <= self.rules.threshold + _EPS:
                continue  # earlier moves filled its hole
            if card in receivers:
                skipped.append(self._skip(card, SkipReason.RECEIVED, None))
                continue
            done = self._fix(card, movable, held)
            if isinstance(done, Skip):
                skipped.append(done)
                continue
            self.moves.extend(done)
            cleared.append(card)
            receivers.update((m.target.node_index, m.target.cards[0]) for m in done)
        pool_after = pool_fragmentation(snap, self.sizes)
        moved = {(d.node_index, d.cards[0]) for m in self.moves for d in (m.source, m.target)}
        card_after = {self._name(c): float(self.frag[c]) for c in sorted(moved)}
        card_before = {self._name(c): self.touched[c] for c in sorted(moved)}
        for move in reversed(self.moves):  # leave the snapshot as it was given
            snap.forget(move.target)
            snap.assume(move.source)
        return DefragPlan(
            moves=tuple(self.moves),
            cleared=tuple(self._name(c) for c in cleared),
            skipped=tuple(skipped),
            pool_before=pool_before,
            pool_after=pool_after,
            card_before=card_before,
            card_after=card_after,
        )

    def _held_back(self, r: Resident) -> SkipReason | None:
        """Why this slice never moves (None: it may): an exclusive pod, one spanning several
        cards, one no owner recreates (unless moving orphans is on)."""
        if r.exclusive:
            return SkipReason.EXCLUSIVE
        if len(r.decision.cards) != 1:
            return SkipReason.MULTI_CARD
        if not self.rules.move_orphans and not r.has_owner:
            return SkipReason.NO_OWNER
        return None

    def _first_held_back(self, here: Sequence[Resident]) -> Block:
        """The reason a card keeps slices that never move, the strongest first (exclusive, then
        multi-card, then orphan), with the slice; None when every slice may move."""
        found = [(why, r.id) for r in here if (why := self._held_back(r)) is not None]
        order = (SkipReason.EXCLUSIVE, SkipReason.MULTI_CARD, SkipReason.NO_OWNER)
        return min(found, key=lambda f: order.index(f[0])) if found else None

    # -- fixing one card ----------------------------------------------------------------------
    def _fix(self, card: Card, movable: Sequence[Resident], held: Block) -> list[Move] | Skip:
        """Move the card's movable slices off, lowest priority first (the larger first among
        equals: fewer moves), until its fragmentation is at or under the threshold. A slice
        whose PodDisruptionBudget allows no more disruptions, or that no card can take, stays
        and the next is tried; if the card cannot get under the threshold, every move is undone
        and the card is kept with the reason that stopped it."""
        before = float(self.frag[card])
        self.closed[card] = True
        done: list[Move] = []
        used: Counter[str] = Counter()
        stopped: Block = None
        limit = self.rules.max_moves
        for r in sorted(movable, key=lambda r: (r.priority, -r.decision.mem_bytes[0], r.id)):
            if self.frag[card] <= self.rules.threshold + _EPS:
                break
            budget = r.disruption_budget
            if budget is not None and self.budgets.get(budget, 0) - used[budget] < 1:
                stopped = stopped or (SkipReason.DISRUPTION_BUDGET, r.id)
                continue
            if limit is not None and len(self.moves) + len(done) >= limit:
                stopped = (SkipReason.MOVE_LIMIT, None)
                break
            target = self._move_one(r)
            if target is None:
                stopped = stopped or (SkipReason.NO_TARGET, r.id)
                continue
            done.append(Move(r.id, r.priority, r.decision, target))
            if budget is not None:
                used[budget] += 1
        if self.frag[card] > self.rules.threshold + _EPS:
            self._undo(done)
            self.closed[card] = False
            why, who = stopped or held or (SkipReason.STILL_FRAGMENTED, None)
            return self._skip(card, why, who, before)
        for name, count in used.items():
            self.budgets[name] -= count
        return done

    def _move_one(self, r: Resident) -> Decision | None:
        """Move one slice on the snapshot to its best target; None (and nothing changed) if no
        card can take it within the rules."""
        snap, req = self.snap, r.decision.request
        source = r.decision
        snap.forget(source)
        self._refresh(source)
        feas = feasibility(snap, req)
        fit = feas.card_fit & ~self.closed & (feas.reason == int(Reason.FITS))[:, None]
        fit &= ~snap.fully_free()  # moving onto an empty card only moves the hole
        rows, slots = np.nonzero(fit)
        if len(rows):
            total = snap.gmem_total[rows, slots]
            mem_after = snap.gmem_free[rows, slots] - feas.demand.mem[rows, slots]
            comp_after = snap.comp_free[rows, slots] - feas.demand.compute
            after = card_fragmentation(
                mem_after, comp_after, total, snap.mem_known[rows, slots], self.sizes
            )
            limit = np.maximum(self.rules.threshold, self.frag[rows, slots]) + _EPS
            ok = np.flatnonzero(after <= limit)
        else:
            ok = np.zeros(0, dtype=np.int64)
        if not len(ok):
            snap.assume(source)
            self._refresh(source)
            return None
        left = mem_after[ok] / np.maximum(total[ok], 1)
        best = int(ok[np.lexsort((slots[ok], rows[ok], after[ok], left))[0]])
        i, slot = int(rows[best]), int(slots[best])
        target = Decision(
            request=req,
            node_index=i,
            node=snap.names[i],
            cards=(slot,),
            mem_bytes=(int(feas.demand.mem[i, slot]),),
            compute_milli=(int(feas.demand.compute),),
            offsets=(int(snap.gmem_total[i, slot] - snap.gmem_free[i, slot]),),
            score=0.0,
        )
        snap.assume(target)
        self._refresh(target)
        return target

    def _undo(self, done: Sequence[Move]) -> None:
        for move in reversed(done):
            self.snap.forget(move.target)
            self._refresh(move.target)
            self.snap.assume(move.source)
            self._refresh(move.source)

    # -- bookkeeping --------------------------------------------------------------------------
    def _refresh(self, decision: Decision) -> None:
        """Re-measure the cards a placement uses after it was assumed or forgotten."""
        snap, i = self.snap, decision.node_index
        for slot in decision.cards:
            self.touched.setdefault((i, slot), float(self.frag[i, slot]))
            s = slice(slot, slot + 1)
            self.frag[i, slot] = card_fragmentation(
                snap.gmem_free[i, s],
                snap.comp_free[i, s],
                snap.gmem_total[i, s],
                snap.mem_known[i, s],
                self.sizes,
            )[0]

    def _name(self, card: Card) -> tuple[str, int]:
        return self.snap.names[card[0]], card[1]

    def _skip(
        self,
        card: Card,
        reason: SkipReason,
        resident: str | None,
        frag: float | None = None,
    ) -> Skip:
        value = float(self.frag[card]) if frag is None else frag
        return Skip(self.snap.names[card[0]], card[1], value, reason, resident)
