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
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


class FragCache:
    """Per-node fragmentation before, and after each request shape, kept fresh by node version."""

    def __init__(self, snap: ClusterSnapshot, model: NodeMeasure) -> None:
        self.uid = snap.uid
        self.model = model
        n = len(snap)
        self.before = np.zeros(n)
        self.before_version = np.full(n, -1, dtype=np.int64)
        self.after: dict[Shape, tuple[FloatArray, IntArray]] = {}

    def frag_before(self, snap: ClusterSnapshot, rows: IntArray) -> FloatArray:
        stale = rows[self.before_version[rows] != snap.version[rows]]
        if len(stale):
            self.before[stale] = self.model.node_frag(
                stale, snap.cpu_free[stale], snap.share_free[stale]
            )
            self.before_version[stale] = snap.version[stale]
        return self.before[rows]

    def frag_after(self, ctx: PlanContext) -> FloatArray:
        snap = ctx.snap
        key = Shape.of(ctx.req)
        entry = self.after.get(key)
        if entry is None:
            entry = (np.zeros(len(snap)), np.full(len(snap), -1, dtype=np.int64))
            self.after[key] = entry
        values, versions = entry
        rows = ctx.rows
        stale_mask = versions[rows] != snap.version[rows]
        if stale_mask.any():
            stale = rows[stale_mask]
            sub = PlanContext(snap, ctx.req, ctx.feas, stale)
            values[stale] = self.model.node_frag(stale, sub.cpu_after, sub.share_after)
            versions[stale] = snap.version[stale]
        return values[rows]


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
        cache = self.cache(ctx.snap)
        delta = cache.frag_before(ctx.snap, ctx.rows) - cache.frag_after(ctx)
        return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
