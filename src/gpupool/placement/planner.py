"""The planner: filter, score, pick. Same code for the extender and the simulator."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.placement.cards import topology_cards
from gpupool.placement.context import PlanContext
from gpupool.placement.filters import UNRESOLVABLE, Feasibility, Reason, explain, feasibility
from gpupool.placement.policies import Policy, make_policy
from gpupool.placement.preference import with_preferences
from gpupool.placement.snapshot import ClusterSnapshot, Decision, IntArray
from gpupool.placement.verdict import REASON_LABEL, Unschedulable
from gpupool.placement.workload import TargetWorkload


class Planner:
    """Places one request at a time on a snapshot with one policy.

    Ties between equal scores go to the node that comes first in `rank` (a permutation of node
    indexes; identity by default), so a run is deterministic for a given order.
    """

    def __init__(
        self,
        policy: str | Policy = "gpupool",
        workload: TargetWorkload | None = None,
        seed: int = 0,
        rank: Sequence[int] | IntArray | None = None,
    ) -> None:
        self.policy = make_policy(policy, workload, seed) if isinstance(policy, str) else policy
        self._rank = None if rank is None else np.asarray(rank, dtype=np.int64)

    def rank(self, snap: ClusterSnapshot) -> IntArray:
        if self._rank is None or len(self._rank) != len(snap):
            self._rank = np.arange(len(snap), dtype=np.int64)
        return self._rank

    def scores(
        self, snap: ClusterSnapshot, req: Request
    ) -> tuple[Feasibility, IntArray, np.ndarray]:
        """Feasibility of every node, the candidate rows and their scores (higher is better):
        the policy's, moved by the request's soft model preferences (`preference.py`)."""
        feas = feasibility(snap, req)
        rows = feas.nodes
        if len(rows) == 0:
            return feas, rows, np.zeros(0)
        ctx = PlanContext(snap, req, feas, rows)
        return feas, rows, with_preferences(ctx, self.policy.score(ctx), self.policy.scale)

    def plan(self, snap: ClusterSnapshot, req: Request) -> Decision | Unschedulable:
        feas, rows, scores = self.scores(snap, req)
        if len(rows) == 0:
            return self.unschedulable(snap, req, feas)
        pick = first_best(scores, self.rank(snap)[rows])
        return self.decide(snap, req, feas, int(rows[pick]), float(scores[pick]))

    def decide(
        self, snap: ClusterSnapshot, req: Request, feas: Feasibility, i: int, score: float
    ) -> Decision:
        """The decision for node i: which cards, how many bytes and how much compute each."""
        if not req.wants_gpu:
            cards: tuple[int, ...] = ()
        elif req.gpu_count > 1:
            cards = topology_cards(snap, req, feas, i)
        else:
            ctx = PlanContext(snap, req, feas, np.array([i], dtype=np.int64))
            cards = tuple(int(c) for c in ctx.cards[0])
            if req.is_share:
                chosen = self.policy.slice_card(ctx, np.flatnonzero(feas.card_fit[i]))
                cards = cards if chosen is None else (chosen,)
        mem = tuple(int(feas.demand.mem[i, c]) for c in cards)
        compute = tuple(MILLI if req.whole_cards else feas.demand.compute for _ in cards)
        offsets = tuple(int(snap.gmem_total[i, c] - snap.gmem_free[i, c]) for c in cards)
        return Decision(
            request=req,
            node_index=i,
            node=snap.names[i],
            cards=cards,
            mem_bytes=mem,
            compute_milli=compute,
            offsets=offsets,
            score=score,
        )

    @staticmethod
    def unschedulable(snap: ClusterSnapshot, req: Request, feas: Feasibility) -> Unschedulable:
        tally = np.bincount(feas.reason, minlength=len(Reason))
        counts = {Reason(code): int(n) for code, n in enumerate(tally) if n and code}
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        reasons = tuple((REASON_LABEL[why.name], n) for why, n in ranked)
        unresolvable = bool(len(snap)) and all(why in UNRESOLVABLE for why in counts)
        return Unschedulable(req, len(snap), reasons, unresolvable)

    @staticmethod
    def failed_nodes(snap: ClusterSnapshot, req: Request, feas: Feasibility) -> dict[str, str]:
        """Node name → specific reason, for every node that cannot take the request."""
        return {
            snap.names[int(i)]: explain(snap, req, feas, int(i))
            for i in np.flatnonzero(feas.reason != Reason.FITS)
        }


def first_best(scores: np.ndarray, ranks: IntArray) -> int:
    """The planner's choice among scored candidates: the index of the best score, the lowest
    rank among equal scores (the node order, by default: which packs). The extender's
    prioritize gives this candidate its top score, so live and simulated picks agree."""
    tied = np.flatnonzero(scores == scores.max())
    return int(tied[np.argmin(ranks[tied])])
