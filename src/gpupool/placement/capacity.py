"""Stranded capacity: how much of a node's free GPU share a stream of one task shape could use.

FGD's measure (fragmentation.py) asks, per shape, "can this node host one more?". This one asks
"if only tasks of this shape came, how much of the free share would they fill?", counting every
instance that fits: per card, as many slices as fit (the remainder below one slice is stranded);
whole-card shapes, as many groups of free cards as fit; and at most as many instances as the
node's free CPU and free memory allow, which is where GPUs most often strand on real nodes (a
node with three free cards and CPU for one task strands two cards, which the one-step measure
cannot see; a G2 node holding a 4-GPU task that asked 313 of its 384 GiB has four free cards and
memory for no other multi-GPU task).
The node's stranded capacity is the frequency-weighted sum over shapes; CPU-only shapes count all
free share, as in FGD.

CPU strands cards only beyond the node's own ratio: the instances its free CPU denies, less those
that the node's own CPU per card (its cores times the free part of its cards) would deny. A
96-core node with 8 idle cards feeds only five 18-core 1-GPU tasks, but that is the node, not
fragmentation: no placement made it so and none can undo it. Counted as stranded, it made an
idle node look fragmented, so that a low-CPU multi-GPU task placed there "repaired" it; the
measure then broke up idle 8-card nodes that whole-node tasks need. CPU that other tasks took
faster than cards still counts in full. Memory still bounds in absolute terms: the same rule for
memory was tried and not kept (docs/simulator.md, "A node's own CPU per card").

Memory is each shape's mean ask (TargetWorkload.memory_mib); FGD's measure has no memory.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.fragmentation import FloatArray, threshold
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


def _shortfall(
    free: IntArray, own: FloatArray, need: IntArray, inst: IntArray, per_inst: IntArray
) -> FloatArray:
    """(B, M): the fraction of each shape's instances that the node's `free` CPU denies beyond
    what `own`, the node's own CPU for its free cards, would deny."""
    # floor(own) // need == own // need for own >= 0 and a whole need, and integer division
    # is several times faster than floating
    whole = own.astype(np.int64)[:, None]
    gap = np.minimum(whole // need, inst) - np.minimum(free[:, None] // need, inst)
    return np.asarray(np.maximum(gap, 0.0) / per_inst, dtype=np.float64)


class CapacityModel:
    def __init__(self, snap: ClusterSnapshot, workload: TargetWorkload) -> None:
        self.cpu_only_weight = 0.0
        groups: dict[Shape, list[tuple[int, int, float]]] = {}
        for k, (shape, weight) in enumerate(zip(workload.shapes, workload.weights, strict=True)):
            if not shape.wants_gpu:
                self.cpu_only_weight += weight
                continue
            gpu_part = replace(shape, cpu_milli=0)
            groups.setdefault(gpu_part, []).append((shape.cpu_milli, workload.memory_of(k), weight))
        # Shapes that differ only in CPU share the card arithmetic; the CPU bound is per shape.
        # Stacked so that one pass of array operations measures every group: thresholds
        # (S, N, G), and per member shape (M) its group, CPU demand and weight.
        parts = list(groups.items())
        self.group_count = len(parts)
        self._need = (
            np.stack([np.maximum(threshold(snap, p), 1) for p, _ in parts])
            if parts
            else np.ones((0, *snap.present.shape), dtype=np.int64)
        )
        self._count = np.array([max(p.gpu_count, 1) for p, _ in parts], dtype=np.int64)[:, None]
        self._whole = np.array([p.whole_cards for p, _ in parts], dtype=bool)[:, None]
        self._member_group = np.array(
            [k for k, (_, members) in enumerate(parts) for _ in members], dtype=np.int64
        )
        self._group_start = np.searchsorted(self._member_group, np.arange(len(parts)))
        # A shape without a CPU ask: a need so large that free and own CPU deny it alike (none).
        never = np.iinfo(np.int64).max // 2
        self._cpus = np.array([c or never for _, m in parts for c, _, _ in m], dtype=np.int64)
        self._mems = np.array([mem for _, m in parts for _, mem, _ in m], dtype=np.int64)
        self._weights = np.array([w for _, m in parts for _, _, w in m], dtype=np.float64)
        self._group_milli = self._count * MILLI
        self._mem_divisor = np.maximum(self._mems, 1)
        self._mem_unbounded = np.where(self._mems > 0, 0, never)
        cards = snap.present.sum(axis=1).astype(np.float64) * MILLI
        # the node's own CPU per milli of card: its CPU for a free share is that times the share
        self._cpu_per_share = np.divide(
            snap.cpu_cap, cards, out=np.zeros_like(cards), where=cards > 0
        )

    def node_frag(
        self,
        rows: IntArray,
        cpu_free: IntArray,
        share_free: IntArray,
        mem_free: IntArray | None = None,
    ) -> FloatArray:
        total = share_free.sum(axis=1).astype(np.float64)
        if not self.group_count:
            return np.asarray(self.cpu_only_weight * total, dtype=np.float64)
        need = self._need[:, rows]  # (S, B, G)
        per_card = share_free[None] // need  # 0 where it does not fit (need >= 1)
        # whole-card shapes (need is a whole card, so per_card is 0 or 1): groups of `count`
        # free cards; slices (count 1): every slice that fits a card
        instances = per_card.sum(axis=2) // self._count  # (S, B)
        used = np.where(
            self._whole, instances * self._group_milli, (per_card * need).sum(axis=2)
        ).astype(np.float64)
        # (B, M): the fraction of its group's instances the node's CPU and memory allow, per shape
        g = self._member_group
        inst = instances[g].T
        per_inst = np.maximum(inst, 1)
        # A node's own CPU per card is not fragmentation: only CPU that allocation took faster
        # than cards, beyond the node's own ratio for its free cards, strands them.
        own = self._cpu_per_share[rows] * total
        scale = 1.0 - _shortfall(cpu_free, own, self._cpus, inst, per_inst)
        if mem_free is not None:  # memory: an absolute bound (see the module's docstring)
            # shapes without a memory ask: a bound no node memory reaches (scale stays 1)
            fit = mem_free[:, None] // self._mem_divisor + self._mem_unbounded
            scale = np.minimum(scale, fit / per_inst)  # scale <= 1 already
        strand = (total[:, None] - used[g].T * scale) * self._weights  # (B, M)
        per_group = np.add.reduceat(strand, self._group_start, axis=1)  # (B, S)
        terms = np.empty((self.group_count + 1, len(rows)))
        terms[0] = self.cpu_only_weight * total
        terms[1:] = per_group.T
        return np.asarray(np.cumsum(terms, axis=0)[-1], dtype=np.float64)
