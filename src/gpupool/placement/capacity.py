"""Stranded capacity: how much of a node's free GPU share a stream of one task shape could use.

FGD's measure (fragmentation.py) asks, per shape, "can this node host one more?". This one asks
"if only tasks of this shape came, how much of the free share would they fill?", counting every
instance that fits: per card, as many slices as fit (the remainder below one slice is stranded);
whole-card shapes, as many groups of free cards as fit; and at most as many instances as the
node's free CPU allows, which is where GPUs most often strand on real nodes (a node with three
free cards and CPU for one task strands two cards, which the one-step measure cannot see).
The node's stranded capacity is the frequency-weighted sum over shapes; CPU-only shapes count all
free share, as in FGD.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.fragmentation import FloatArray, threshold
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import TargetWorkload


class CapacityModel:
    def __init__(self, snap: ClusterSnapshot, workload: TargetWorkload) -> None:
        self.cpu_only_weight = sum(
            w for s, w in zip(workload.shapes, workload.weights, strict=True) if not s.wants_gpu
        )
        self.shapes = [
            (s.cpu_milli, s.gpu_count, s.whole_cards, w, np.maximum(threshold(snap, s), 1))
            for s, w in zip(workload.shapes, workload.weights, strict=True)
            if s.wants_gpu
        ]

    def node_frag(self, rows: IntArray, cpu_free: IntArray, share_free: IntArray) -> FloatArray:
        total = share_free.sum(axis=1).astype(np.float64)
        stranded = self.cpu_only_weight * total
        for cpu, count, whole, weight, need_all in self.shapes:
            need = need_all[rows]
            fits = share_free >= need
            if whole:
                instances = fits.sum(axis=1) // count
                used = instances * (count * MILLI)
            else:
                per_card = np.where(fits, share_free // need, 0)
                instances = per_card.sum(axis=1)
                used = (per_card * need).sum(axis=1)
            if cpu > 0:
                allowed = cpu_free // cpu
                scale = np.minimum(1.0, allowed / np.maximum(instances, 1))
                used = used * scale
            stranded += weight * (total - used)
        return np.asarray(stranded, dtype=np.float64)
