"""gpupool's default policy: FGD's gradient over a measure that also sees stranded capacity.

FGD (fgd.py) scores a placement by how much it grows the node's fragmentation, where a node's
fragmentation for a task shape is all its free GPU share if it cannot host one more such task,
else the cards too small for it. That one-step view misses what strands GPUs on real nodes: a
node that can host one more 1-GPU task but has CPU for only one strands its other free cards;
a card with 600 milli free is "fine" for 470-milli tasks yet only one fits. The capacity measure
(capacity.py) counts what a stream of each shape could actually use, CPU included (the CPU that
allocation took, not the node's own CPU per card), and counts what it leaves as stranded only for
the tasks of the workload that could not take one more task there.

gpupool descends the mean of the two measures — the one-step and the fill-the-node horizon,
weighted equally — with FGD's sigmoid scoring truncated to whole points, so that near-equal
placements tie and go to the first node in a fixed order (which packs, as in the paper's runs).
On the Alibaba trace this beats FGD on every published pod list (see README, Results).

Tasks restricted to some models: each measure counts a restricted shape only on nodes of its
models (accepting.py), and an unrestricted placement pays for the share it takes out of the
reserve restricted tasks need on the model it lands on (reserve.py). Both are no-ops on a
workload without restrictions. Tasks that only few nodes are big enough for (8 cards, 120 cores,
700 GiB): a placement that could have gone elsewhere pays for the share it takes out of their
reserve in the same way (hosts.py); the capacity measure bounds every shape by the node's free
memory as well as its CPU (capacity.py).
"""

from __future__ import annotations

import numpy as np

from gpupool.placement.capacity import CapacityModel
from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray, FragmentationModel, NodeMeasure
from gpupool.placement.policies.accepting import AcceptingMeasure
from gpupool.placement.policies.fgd import FgdPolicy, points
from gpupool.placement.policies.hosts import HostReserve
from gpupool.placement.policies.reserve import ModelReserve
from gpupool.placement.rows import kinds
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import TargetWorkload


class MeanMeasure:
    """The mean of several node measures."""

    def __init__(self, *measures: NodeMeasure) -> None:
        self.measures = measures
        self.node_kind = kinds(*[m.node_kind for m in measures])

    def node_frag(
        self,
        rows: IntArray,
        cpu_free: IntArray,
        share_free: IntArray,
        mem_free: IntArray | None = None,
    ) -> FloatArray:
        # summed in order, then divided: what np.mean over the stacked values gives, without
        # stacking them (this runs once per scored request)
        total = self.measures[0].node_frag(rows, cpu_free, share_free, mem_free)
        for m in self.measures[1:]:
            total = total + m.node_frag(rows, cpu_free, share_free, mem_free)
        return np.asarray(total / len(self.measures), dtype=np.float64)


class GpupoolPolicy(FgdPolicy):
    name = "gpupool"
    summary = "FGD over the mean of one-step fragmentation and stranded capacity (CPU-aware)"

    def __init__(self, workload: TargetWorkload) -> None:
        super().__init__(workload)
        self.reserve = ModelReserve(workload)
        self._hosts: HostReserve | None = None

    def hosts(self, snap: ClusterSnapshot) -> HostReserve:
        if self._hosts is None or self._hosts.uid != snap.uid:
            self._hosts = HostReserve(snap, self.workload)
        return self._hosts

    def measure(self, snap: ClusterSnapshot) -> NodeMeasure:
        return MeanMeasure(
            AcceptingMeasure(snap, self.workload, FragmentationModel),
            AcceptingMeasure(snap, self.workload, CapacityModel),
        )

    def score(self, ctx: PlanContext) -> FloatArray:
        delta = self.cache(ctx.snap).delta(ctx) - self.reserve.cost(ctx)
        delta -= self.hosts(ctx.snap).cost(ctx)
        return points(delta)
