"""Model reserves: the free GPU share that tasks restricted to a model will need there.

A task that accepts only some models (`gpu_spec`, `gpupool.io/gpu-model`) can go nowhere else,
while an unrestricted task can go anywhere; so an unrestricted task placed on a model whose free
share is all needed by that model's restricted tasks takes a place one of them will be refused
later — GPU capacity lost just as surely as a fragment is.

How much is needed: of the target workload's GPU load (count x per-card share, by frequency) a
fraction f_S asks for exactly the model set S. Whatever fills the cluster's remaining free share F
will contain, in expectation, f_S x F of load that can only go to S: that is S's reserve, split
over S's models in proportion to their free share. It shrinks as the cluster fills, so a model
is never held back for demand that cannot arrive before the cluster is full, and it needs no
horizon or rate. A model's surplus is its free share beyond its reserve.

The cost of placing an unrestricted task is the part of its share that comes out of the reserve
of the model it lands on (0 while the model has surplus; all of it once the model is down to its
reserve). It is in milli-GPU, the unit of FGD's fragmentation delta, so the two add without a
weight: both are expected GPU share lost. Restricted tasks pay nothing: they are the reserved
demand. On a workload without restricted tasks every cost is 0 and scores do not move.
"""

from __future__ import annotations

import numpy as np

from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.placement.workload import TargetWorkload


def restricted_fractions(workload: TargetWorkload) -> dict[tuple[str, ...], float]:
    """f_S: the fraction of the workload's GPU load that accepts only the model set S."""
    loads: dict[tuple[str, ...], float] = {}
    total = 0.0
    for shape, weight in zip(workload.shapes, workload.weights, strict=True):
        if not shape.wants_gpu:
            continue
        load = weight * shape.gpu_load
        total += load
        if shape.models:
            key = tuple(sorted(shape.models))
            loads[key] = loads.get(key, 0.0) + load
    return {s: load / total for s, load in loads.items()} if total else {}


class ModelReserve:
    def __init__(self, workload: TargetWorkload) -> None:
        self.fractions = restricted_fractions(workload)

    def __bool__(self) -> bool:
        return bool(self.fractions)

    def surplus(self, snap: ClusterSnapshot) -> FloatArray:
        """Per model id, its free share beyond its reserve (negative: short of it)."""
        models = len(snap.model_names)
        cards = snap.present & snap.healthy
        free = np.bincount(
            snap.model_id[cards], weights=snap.share_free[cards], minlength=models
        ).astype(np.float64)
        total = float(free.sum())
        reserve = np.zeros(models)
        for names, fraction in self.fractions.items():
            ids = [snap.model_ids[m] for m in names if m in snap.model_ids]
            in_set = free[ids].sum()
            if ids and in_set > 0:
                reserve[ids] += fraction * total * free[ids] / in_set
        return np.asarray(free - reserve, dtype=np.float64)

    def cost(self, ctx: PlanContext) -> FloatArray:
        """Per candidate, the milli-GPU an unrestricted request would take out of reserves."""
        req, rows = ctx.req, ctx.rows
        if not self or not req.wants_gpu or req.models or len(rows) == 0:
            return np.zeros(len(rows))
        snap = ctx.snap
        surplus = np.maximum(self.surplus(snap), 0.0)
        taken = (snap.share_free[rows].sum(axis=1) - ctx.share_after.sum(axis=1)).astype(float)
        # The node's model: that of the first card the request takes there.
        model = snap.model_id[rows, ctx.cards[:, 0]]
        return np.asarray(np.clip(taken - surplus[model], 0.0, taken), dtype=np.float64)
