"""FGD: place where the fragmentation of the target workload grows least (Weng et al., ATC'23).

Scores follow the paper's simulator exactly: sigmoid of the fragmentation decrease (in milli-GPU,
scaled by 1/1000) times 100, truncated to an integer. The truncation makes ties, and the planner
breaks ties by a fixed node order, which is what the published numbers rest on (see README).
Fragmentation before and after placement is cached per node and only recomputed for nodes whose
state changed since, so a run costs O(changed nodes) per request instead of O(cluster).
"""

from __future__ import annotations

import numpy as np

from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray, FragmentationModel, NodeMeasure
from gpupool.placement.policies.base import Policy
from gpupool.placement.rows import distinct
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


def points(delta: FloatArray) -> FloatArray:
    """FGD's score of a fragmentation decrease (milli-GPU): sigmoid x 100, truncated to whole
    points as the paper's simulator does (the truncation makes the ties the node order breaks)."""
    return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))


# batches of more rows than this are measured once per distinct row (FragCache.measure)
_DISTINCT_FROM = 32


class FragCache:
    """Per-node fragmentation before, and after each request shape, kept fresh by node version."""

    def __init__(self, snap: ClusterSnapshot, model: NodeMeasure) -> None:
        self.uid = snap.uid
        self.model = model
        n = len(snap)
        self.before = np.zeros(n)
        self.before_version = np.full(n, -1, dtype=np.int64)
        self.after: dict[Shape, tuple[FloatArray, IntArray]] = {}

    def delta(self, ctx: PlanContext) -> FloatArray:
        """Fragmentation before minus after placing on each candidate (higher is better).

        Nodes whose state changed since they were last measured are re-measured in one batch:
        before-states and after-states of this request's shape together.
        """
        snap, rows = ctx.snap, ctx.rows
        key = ctx.shape
        entry = self.after.get(key)
        if entry is None:
            entry = (np.zeros(len(snap)), np.full(len(snap), -1, dtype=np.int64))
            self.after[key] = entry
        after, after_version = entry
        version = snap.version[rows]
        stale_before = rows[self.before_version[rows] != version]
        stale_after = rows[after_version[rows] != version]
        nb = len(stale_before)
        if nb or len(stale_after):
            sub = PlanContext(snap, ctx.req, ctx.feas, stale_after)
            values = self.measure(
                np.concatenate([stale_before, stale_after]),
                np.concatenate([snap.cpu_free[stale_before], sub.cpu_after]),
                np.concatenate([snap.share_free[stale_before], sub.share_after]),
                np.concatenate([snap.mem_free[stale_before], sub.mem_after]),
            )
            self.before[stale_before] = values[:nb]
            self.before_version[stale_before] = snap.version[stale_before]
            after[stale_after] = values[nb:]
            after_version[stale_after] = snap.version[stale_after]
        return np.asarray(self.before[rows] - after[rows], dtype=np.float64)

    def measure(
        self, rows: IntArray, cpu_free: IntArray, share_free: IntArray, mem_free: IntArray
    ) -> FloatArray:
        """The model's measure of each row, taken once per distinct (node kind, state): in a
        fill of the trace, 83% of the rows of batches over 256 rows repeat one (idle nodes of one
        type, and the states after a placement on them), 25% of those of 33 to 64 rows, 2% of
        those of 8 or fewer; finding them costs about as much as measuring a few rows, so small
        batches are measured as they come."""
        if len(rows) <= _DISTINCT_FROM:
            return self.model.node_frag(rows, cpu_free, share_free, mem_free)
        first, back = distinct(self.model.node_kind[rows], cpu_free, mem_free, share_free)
        if len(first) == len(rows):
            return self.model.node_frag(rows, cpu_free, share_free, mem_free)
        values = self.model.node_frag(
            rows[first], cpu_free[first], share_free[first], mem_free[first]
        )
        return np.asarray(values[back], dtype=np.float64)


class FgdPolicy(Policy):
    name = "fgd"
    summary = "fragmentation gradient descent (ATC'23): least growth of expected unusable GPU"

    def __init__(self, workload: TargetWorkload) -> None:
        self.workload = workload
        self._cache: FragCache | None = None

    def measure(self, snap: ClusterSnapshot) -> NodeMeasure:
        return FragmentationModel(snap, self.workload)

    def cache(self, snap: ClusterSnapshot) -> FragCache:
        if self._cache is None or self._cache.uid != snap.uid:
            self._cache = FragCache(snap, self.measure(snap))
        return self._cache

    def score(self, ctx: PlanContext) -> FloatArray:
        return points(self.cache(ctx.snap).delta(ctx))
