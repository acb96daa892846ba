"""The defragmentation planner: pure, over a placement snapshot, with exact what-ifs.

A card whose fragmentation (`card_fragmentation`, the operators' figure) is above the threshold is
a *source*. The planner tries to clear whole sources — every slice on it moved to another card —
because an emptied card is usable by every request again, which no partial clearing achieves.
Sources are tried lowest priority first (the highest priority among a card's slices), then by how
much memory a move gives back (the card's fragmentation over its number of slices), so that a bound
on moves spends them where they recover most. On a source the slices move lowest priority first. A
card is never cleared if it holds an exclusive pod, a pod spanning several cards, a pod no owner
would recreate (unless moving orphans is on), or a pod whose PodDisruptionBudget allows too few
disruptions; a budget named by a slice but absent from `budgets` allows none.

Each move is asked of the placement filters on the snapshot with the slice's own placement
forgotten (`feasibility`: model, health, cordons, CPU and memory of the node, room on the card),
then assumed, so the moves in order are feasible one after another and never over-commit a card
(`assume` refuses). A target must not be a source already cleared or being cleared, and must end at
or below the threshold — or, if it was above already, no higher than it was: no move raises any
card's fragmentation above the threshold. Nor is it an empty card: a slice moved there would only
move the hole, and use up a card that whole-card requests can take. Among the targets that pass,
the best fit (least free memory left, as a share of the card) wins, which fills holes and leaves
empty cards empty. If one slice of a source has no target the card's earlier moves are undone and
the card is skipped with that reason. A card that received slices is not cleared in the same round.
The snapshot is left exactly as it was given (every what-if is undone with `forget`/`assume`).
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
        sources: list[tuple[tuple[int, float, int, int], Card, list[Resident]]] = []
        for i, slot in ((int(a), int(b)) for a, b in over):
            here = on_card.get((i, slot), [])
            blocked = self._static_block(here)
            if blocked is not None:
                skipped.append(self._skip((i, slot), *blocked))
                continue
            key = (max(r.priority for r in here), -self.frag[i, slot] / len(here), i, slot)
            sources.append((key, (i, slot), here))
        sources.sort(key=lambda s: s[0])
        cleared: list[Card] = []
        receivers: set[Card] = set()
        for _, card, here in sources:
            if self.frag[card] <= self.rules.threshold + _EPS:
                continue  # earlier moves filled its hole
            why = self._round_block(card, here, receivers)
            if why is not None:
                skipped.append(self._skip(card, *why))
                continue
            done = self._clear(card, here)
            if isinstance(done, Skip):
                skipped.append(done)
                continue
            self.moves.extend(done)
            cleared.append(card)
            receivers.update((m.target.node_index, m.target.cards[0]) for m in done)
            for r in here:
                if r.disruption_budget is not None:
                    self.budgets[r.disruption_budget] -= 1
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

    def _static_block(self, here: Sequence[Resident]) -> tuple[SkipReason, str | None] | None:
        """Why no round could clear a card with these slices (None: it may be tried)."""
        if not here:
            return SkipReason.STILL_FRAGMENTED, None
        for r in here:
            if r.exclusive:
                return SkipReason.EXCLUSIVE, r.id
        for r in here:
            if len(r.decision.cards) != 1:
                return SkipReason.MULTI_CARD, r.id
        if not self.rules.move_orphans:
            for r in here:
                if not r.has_owner:
                    return SkipReason.NO_OWNER, r.id
        return None

    def _round_block(
        self, card: Card, here: Sequence[Resident], receivers: set[Card]
    ) -> tuple[SkipReason, str | None] | None:
        """Why this round cannot clear the card, given what it has done so far."""
        if card in receivers:
            return SkipReason.RECEIVED, None
        need = Counter(r.disruption_budget for r in here if r.disruption_budget is not None)
        for name, count in sorted(need.items()):
            if self.budgets.get(name, 0) < count:
                blocker = next(r.id for r in here if r.disruption_budget == name)
                return SkipReason.DISRUPTION_BUDGET, blocker
        limit = self.rules.max_moves
        if limit is not None and len(self.moves) + len(here) > limit:
            return SkipReason.MOVE_LIMIT, None
        return None

    # -- clearing one card --------------------------------------------------------------------
    def _clear(self, card: Card, here: Sequence[Resident]) -> list[Move] | Skip:
        before = float(self.frag[card])
        self.closed[card] = True
        done: list[Move] = []
        for r in sorted(here, key=lambda r: (r.priority, r.id)):
            target = self._move_one(r)
            if target is None:
                self._undo(done)
                self.closed[card] = False
                return self._skip(card, SkipReason.NO_TARGET, r.id, before)
            done.append(Move(r.id, r.priority, r.decision, target))
        if self.frag[card] > self.rules.threshold + _EPS:
            self._undo(done)
            self.closed[card] = False
            return self._skip(card, SkipReason.STILL_FRAGMENTED, None, before)
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
