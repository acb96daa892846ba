"""Group reserves: the whole-card groups that multi-GPU tasks will need.

A task asking k whole GPUs needs k idle cards on one node and its CPU there; a 1-GPU task, a
slice or a CPU-only task placed on such a node can break the group, and the k-GPU task that
would have used it is refused later. FGD prices that with the shape's frequency among tasks, so
an 8-GPU task counts like a 0.1-GPU slice although its refusal loses 80 times the allocation.

Here, as for model reserves (reserve.py): a fraction f_s of the target workload's GPU load is
multi-GPU shape s (k cards, c CPU); of whatever fills the remaining free share F, f_s x F is
expected to be s. The supply for s is the cluster's share in groups s can take now (per node,
k x 1000 milli for each instance that fits in the idle cards and the free CPU). While supply
covers the reserve, breaking a group costs nothing; once short, a placement costs the group
share it removes below the reserve: expected refused demand in milli-GPU, the unit of FGD's
fragmentation delta, so it adds without a weight. A request pays nothing for groups of its own
card count (it is the demand reserved). Without multi-GPU shapes every cost is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray, threshold
from gpupool.placement.policies.reserve import shape_load
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


@dataclass(frozen=True, slots=True)
class _Group:
    shape: Shape
    fraction: float  # of the workload's GPU load


class GroupReserve:
    def __init__(self, workload: TargetWorkload) -> None:
        loads = [
            w * shape_load(s) for s, w in zip(workload.shapes, workload.weights, strict=True)
        ]
        total = sum(loads)
        self.groups = [
            _Group(s, load / total)
            for s, load in zip(workload.shapes, loads, strict=True)
            if s.gpu_count > 1 and total
        ]
        self._need: dict[tuple[int, Shape], IntArray] = {}

    def need(self, snap: ClusterSnapshot, shape: Shape) -> IntArray:
        key = (snap.uid, shape)
        if key not in self._need:
            self._need[key] = threshold(snap, shape)
        return self._need[key]

    def supply(
        self, snap: ClusterSnapshot, rows: IntArray, cpu: IntArray, share: IntArray, g: _Group
    ) -> FloatArray:
        """Per row, the milli-GPU in instances of group g that fit (idle cards and CPU)."""
        idle = (share >= self.need(snap, g.shape)[rows]) & (share >= MILLI)
        count = g.shape.gpu_count
        instances = idle.sum(axis=1) // count
        if g.shape.cpu_milli > 0:
            instances = np.minimum(instances, cpu // g.shape.cpu_milli)
        return np.asarray(instances * count * MILLI, dtype=np.float64)

    def cost(self, ctx: PlanContext) -> FloatArray:
        req, rows, snap = ctx.req, ctx.rows, ctx.snap
        cost = np.zeros(len(rows))
        if not self.groups or len(rows) == 0:
            return cost
        everyone = np.arange(len(snap))
        free = float(snap.share_free[snap.present & snap.healthy].sum())
        for g in self.groups:
            if g.shape.gpu_count == req.gpu_count:
                continue
            have = float(self.supply(snap, everyone, snap.cpu_free, snap.share_free, g).sum())
            short = g.fraction * free - have
            before = self.supply(snap, rows, snap.cpu_free[rows], snap.share_free[rows], g)
            after = self.supply(snap, rows, ctx.cpu_after, ctx.share_after, g)
            lost = before - after
            # Shortfall after minus before: the lost group share that falls below the reserve.
            cost += np.clip(short + lost, 0.0, None) - max(short, 0.0)
        return cost
