"""/prioritize over the cache's snapshot: the planner's score of every node kube-scheduler names,
scaled onto its 0..10, written as JSON text (the hot path: with 5,000 hosts, building a dict per
host and encoding it costs more than the planning)."""

from __future__ import annotations

import msgspec
import numpy as np

from gpupool.adapters.extender_http.plans import ROWS_MEMO, PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import MAX_EXTENDER_PRIORITY

_SCORE_TAILS = tuple(f"{s}}},".encode() for s in range(MAX_EXTENDER_PRIORITY + 1))


def scale_scores(values: np.ndarray) -> np.ndarray:
    """Planner scores (higher is better, any range; NaN: no score) onto kube-scheduler's 0..10,
    the best 10, the worst 0, all 10 when equal; NaN gets 0."""
    ok = ~np.isnan(values)
    scaled = np.zeros(len(values), dtype=np.int64)
    if ok.any():
        lo, hi = float(values[ok].min()), float(values[ok].max())
        if hi > lo:
            scaled[ok] = np.rint(MAX_EXTENDER_PRIORITY * (values[ok] - lo) / (hi - lo))
        else:
            scaled[ok] = MAX_EXTENDER_PRIORITY
    return scaled


def node_scores(plans: PlanMemo, pod: ScheduledPod, names: tuple[str, ...]) -> list[int]:
    """kube-scheduler's 0..10 score of every name, in its order (0: unknown node, or a pod no
    node can take)."""
    plan = plans.plan(pod)
    if isinstance(plan, Refusal):
        return [0] * len(names)
    snap = plans.cache.snapshot()
    by_row = np.full(len(snap) + 1, np.nan)  # the extra last slot answers unknown names
    by_row[plan.rows] = plan.scores
    scores: list[int] = scale_scores(by_row[plans.rows(snap, names)]).tolist()
    return scores


class PriorityEncoder:
    """The prioritize reply as JSON text. Each host's `{"Host":"…","Score":` is kept per node
    list, as the rows are; the scores are one of eleven endings."""

    def __init__(self) -> None:
        self._heads: dict[tuple[str, ...], tuple[bytes, ...]] = {}

    def encode(self, names: tuple[str, ...], scores: list[int]) -> bytes:
        heads = self._heads.get(names)
        if heads is None:
            heads = tuple(b'{"Host":' + msgspec.json.encode(n) + b',"Score":' for n in names)
            if len(self._heads) >= ROWS_MEMO:
                self._heads.pop(next(iter(self._heads)))
            self._heads[names] = heads
        if not names:
            return b"[]"
        # heads and tails interleaved in one list and joined once: no bytes object per host
        parts: list[bytes] = [b"["] * (2 * len(names))
        parts[0::2] = heads
        parts[1::2] = map(_SCORE_TAILS.__getitem__, scores)
        return b"[" + b"".join(parts)[:-1] + b"]"  # [:-1]: the last host's comma
