"""/prioritize over the cache's snapshot, written as JSON text (the hot path: with 5,000 hosts,
building a dict per host and encoding it costs more than the planning).

kube-scheduler adds the extender's 0..10 (times its weight, times 10) to its own plugins' scores
and binds the pod to the node with the highest sum, a random one among equal sums. Two things
follow, and the replies are built for them:

- The planner's choice must be one node. Many nodes often share the planner's best score; the
  simulator takes the first of them in the snapshot's order (nodes by name), which packs, and a
  random one among them undoes most of what the policy gains (the Alibaba `default` list: 14.7 %
  of GPUs left unallocated instead of 10.6). So the planner's pick (the best score, the first
  node by name among equals) gets 10 and every other node at most `OTHERS_MAX` (5).
- A pod that asks for no gpupool GPU still takes CPU and memory on GPU nodes, and where it lands
  decides which GPUs it strands: kube-scheduler alone spreads such pods over the GPU nodes
  (16.9 % unallocated on the same list). The `prioritize-cpu` verb (a second, ignorable extender
  entry with no managedResources, so kube-scheduler asks it about every pod) prefers nodes without
  gpupool GPUs and, among GPU nodes, the first by name: such pods pack onto as few GPU nodes as
  they need.

With the configuration's extender weight of 5, 10 against at most 5 is 250 points: more than
kube-scheduler's resource-spreading scores can differ (NodeResourcesFit and
NodeResourcesBalancedAllocation, 100 each), so they do not move a pod off the pick
(docs/extender.md).
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpupool.adapters.extender_http.plans import ROWS_MEMO, PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import MAX_EXTENDER_PRIORITY
from gpupool.placement.planner import first_best
from gpupool.placement.snapshot import ClusterSnapshot

_SPACE, _ONE, _ZERO = ord(" "), ord("1"), ord("0")
OTHERS_MAX = 5  # the most any node but the pick gets


def pick_scores(values: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Planner scores per name (higher is better, any range; NaN: no score) with each name's
    planner rank, onto kube-scheduler's 0..10: the planner's choice (`first_best`) 10; the
    others scaled onto 0..OTHERS_MAX (all OTHERS_MAX when equal); NaN 0."""
    ok = np.flatnonzero(~np.isnan(values))
    scored = np.zeros(len(values), dtype=np.int64)
    if not len(ok):
        return scored
    lo, hi = float(values[ok].min()), float(values[ok].max())
    if hi > lo:
        scored[ok] = np.rint(OTHERS_MAX * (values[ok] - lo) / (hi - lo))
    else:
        scored[ok] = OTHERS_MAX
    scored[ok[first_best(values[ok], ranks[ok])]] = MAX_EXTENDER_PRIORITY
    return scored


def cpu_pod_scores(ranks: np.ndarray) -> np.ndarray:
    """A pod that asks for no gpupool GPU, over the names' planner ranks (-1: a node without
    gpupool GPUs): 10 on nodes without GPUs, OTHERS_MAX on the first GPU node in the planner's
    order (by name), 0 on the other GPU nodes."""
    scored = np.where(ranks < 0, MAX_EXTENDER_PRIORITY, 0).astype(np.int64)
    gpu = np.flatnonzero(ranks >= 0)
    if len(gpu):
        scored[gpu[np.argmin(ranks[gpu])]] = OTHERS_MAX
    return scored


def _ranks(
    plans: PlanMemo, pod: ScheduledPod, snap: ClusterSnapshot, rows: np.ndarray
) -> np.ndarray:
    """The pod's planner's rank of each row (-1 stays -1: a name the extender does not know)."""
    rank = plans.planners.of(pod.policy).rank(snap)
    return np.where(rows >= 0, rank[rows], -1)


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
    rows = plans.rows(snap, names)
    return pick_scores(by_row[rows], _ranks(plans, pod, snap, rows))


def cpu_score_array(plans: PlanMemo, pod: ScheduledPod, names: tuple[str, ...]) -> np.ndarray:
    """The `prioritize-cpu` scores of every name: `cpu_pod_scores` for a pod that asks for no
    gpupool GPU (not a DRA claim pod: the claim allocator places those), all 0 for any other
    (the `prioritize` verb scores gpupool's own pods)."""
    if pod.request.wants_gpu or pod.view.claim_pod or pod.problem is not None:
        return np.zeros(len(names), dtype=np.int64)
    snap = plans.cache.snapshot()
    return cpu_pod_scores(_ranks(plans, pod, snap, plans.rows(snap, names)))


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
