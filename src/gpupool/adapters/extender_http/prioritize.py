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

_SPACE, _ONE, _ZERO = ord(" "), ord("1"), ord("0")


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
    scores: list[int] = score_array(plans, pod, names).tolist()
    return scores


def score_array(plans: PlanMemo, pod: ScheduledPod, names: tuple[str, ...]) -> np.ndarray:
    """`node_scores` as an int64 array."""
    plan = plans.plan(pod)
    if isinstance(plan, Refusal):
        return np.zeros(len(names), dtype=np.int64)
    snap = plans.cache.snapshot()
    by_row = np.full(len(snap) + 1, np.nan)  # the extra last slot answers unknown names
    by_row[plan.rows] = plan.scores
    return scale_scores(by_row[plans.rows(snap, names)])


class PriorityEncoder:
    """The prioritize reply as JSON text. Per node list (kept as the rows are) one template,
    `[{"Host":"…","Score":XX},…]` with a two-byte slot per host; a reply copies it and writes
    the scores into the slots, a space before one digit (JSON allows it), so no Python object
    is made per host."""

    def __init__(self) -> None:
        self._templates: dict[tuple[str, ...], tuple[bytes, np.ndarray]] = {}

    def _template(self, names: tuple[str, ...]) -> tuple[bytes, np.ndarray]:
        hit = self._templates.get(names)
        if hit is None:
            heads = [b'{"Host":' + msgspec.json.encode(n) + b',"Score":' for n in names]
            width = np.array([len(h) + 4 for h in heads], dtype=np.int64)  # + `XX},`
            starts = 1 + np.concatenate([[0], np.cumsum(width)[:-1]])  # after the `[`
            slots = starts + width - 4
            text = b"[" + b"".join(h + b"00}," for h in heads)[:-1] + b"]"
            hit = (text, slots)
            if len(self._templates) >= ROWS_MEMO:
                self._templates.pop(next(iter(self._templates)))
            self._templates[names] = hit
        return hit

    def encode(self, names: tuple[str, ...], scores: np.ndarray) -> bytes:
        """`scores`: kube-scheduler's 0..10 per name."""
        if not names:
            return b"[]"
        text, slots = self._template(names)
        out = bytearray(text)
        buf = np.frombuffer(out, dtype=np.uint8)
        buf[slots] = np.where(scores >= MAX_EXTENDER_PRIORITY, _ONE, _SPACE)
        buf[slots + 1] = _ZERO + scores % MAX_EXTENDER_PRIORITY
        return bytes(out)
