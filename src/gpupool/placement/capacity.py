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

from dataclasses import replace

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.fragmentation import FloatArray, threshold
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


class CapacityModel:
    def __init__(self, snap: ClusterSnapshot, workload: TargetWorkload) -> None:
        self.cpu_only_weight = 0.0
        groups: dict[Shape, list[tuple[int, float]]] = {}
        for shape, weight in zip(workload.shapes, workload.weights, strict=True):
            if not shape.wants_gpu:
                self.cpu_only_weight += weight
                continue
            gpu_part = replace(shape, cpu_milli=0)
            groups.setdefault(gpu_part, []).append((shape.cpu_milli, weight))
        # Shapes that differ only in CPU share the card arithmetic; the CPU bound is per shape.
        self.groups = [
            (
                gpu_part.gpu_count,
                gpu_part.whole_cards,
                np.maximum(threshold(snap, gpu_part), 1),
                np.array([c for c, _ in members], dtype=np.int64),
                np.array([w for _, w in members], dtype=np.float64),
            )
            for gpu_part, members in groups.items()
        ]

    def node_frag(self, rows: IntArray, cpu_free: IntArray, share_free: IntArray) -> FloatArray:
        total = share_free.sum(axis=1).astype(np.float64)
        stranded = self.cpu_only_weight * total
        for count, whole, need_all, cpus, weights in self.groups:
            need = need_all[rows]
            fits = share_free >= need
            if whole:
                instances = fits.sum(axis=1) // count
                used = (instances * (count * MILLI)).astype(np.float64)
            else:
                per_card = np.where(fits, share_free // need, 0)
                instances = per_card.sum(axis=1)
                used = (per_card * need).sum(axis=1).astype(np.float64)
            # (B, shapes): the fraction of the instances the node's CPU allows, per shape.
            allowed = np.where(
                cpus > 0, cpu_free[:, None] // np.maximum(cpus, 1), instances[:, None]
            )
            scale = np.minimum(1.0, allowed / np.maximum(instances, 1)[:, None])
            stranded += (total[:, None] - used[:, None] * scale) @ weights
        return np.asarray(stranded, dtype=np.float64)
