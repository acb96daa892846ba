"""Stranded capacity: how much of a node's free GPU share a stream of one task shape could use.

FGD's measure (fragmentation.py) asks, per shape, "can this node host one more?". This one asks
"if only tasks of this shape came, how much of the free share would they fill?", counting every
instance that fits: per card, as many slices as fit (the remainder below one slice is stranded);
whole-card shapes, as many groups of free cards as fit; shapes of a slice on each of several
cards, the slices that fit in tasks of that many; and at most as many instances as the
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

What a stream of one shape leaves is stranded only for the tasks that cannot use it: "as if only
this shape came" over-counts, because the workload's other tasks fill the remainders one shape
alone cannot (a 2-card node with 60 GiB strands a card for 47 GiB tasks, but a 10 GiB task takes
it). So each shape's stranded share is weighted by the fraction of the target workload that
could not take one more task in what its stream leaves: the cards (a slice stream leaves each
card's remainder, a whole-card stream the partial cards and the whole cards it did not take), the
CPU and the memory its counted instances leave. That is FGD's one-step question asked of the
capacity measure's horizon; CPU-only tasks never use free GPU share, so they always count.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.cardtables import CardTables, NodeCards
from gpupool.placement.fragmentation import FloatArray, threshold
from gpupool.placement.rows import kinds
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


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
        need = (
            np.stack([np.maximum(threshold(snap, p), 1) for p, _ in parts])
            if parts
            else np.ones((0, *snap.present.shape), dtype=np.int64)
        )
        self._count = np.array([max(p.gpu_count, 1) for p, _ in parts], dtype=np.int64)
        self._whole = np.array([p.whole_cards for p, _ in parts], dtype=bool)
        self._member_group = np.array(
            [k for k, (_, members) in enumerate(parts) for _ in members], dtype=np.int64
        )
        self._group_start = np.searchsorted(self._member_group, np.arange(len(parts)))
        # A shape without a CPU ask: a need so large that free and own CPU deny it alike (none).
        never = np.iinfo(np.int64).max // 2
        self._cpu_ask = np.array([c for _, m in parts for c, _, _ in m], dtype=np.int64)
        self._cpus = np.where(self._cpu_ask > 0, self._cpu_ask, never)
        self._mems = np.array([mem for _, m in parts for _, mem, _ in m], dtype=np.int64)
        self._weights = np.array([w for _, m in parts for _, _, w in m], dtype=np.float64)
        self._weight_total = self.cpu_only_weight + float(self._weights.sum())
        self._slices = np.flatnonzero(~self._whole)  # the slice groups
        self._multi_slices = np.flatnonzero(~self._whole & (self._count > 1))
        sliced = ~self._whole[self._member_group]  # the members of slice groups
        self._whole_members = np.flatnonzero(~sliced)
        self._cards_of = self._count[self._member_group[self._whole_members]]
        # each member's row in [slice groups' rows; whole-card members' rows] (_missed_by_mix)
        self._hosts_row = np.empty(len(self._member_group), dtype=np.int64)
        self._hosts_row[sliced] = np.searchsorted(self._slices, self._member_group[sliced])
        self._hosts_row[self._whole_members] = len(self._slices) + np.arange(
            len(self._whole_members)
        )
        # per group, the weight of its shapes asking at most the i-th smallest CPU ask and the
        # j-th smallest memory ask (index 0: none), so that "which shapes fit this much CPU and
        # memory" is two searchsorted lookups instead of a test of every shape
        self._cpu_values = np.unique(self._cpu_ask)
        self._mem_values = np.unique(self._mems)
        fit_weight = np.zeros((len(parts), len(self._cpu_values) + 1, len(self._mem_values) + 1))
        np.add.at(
            fit_weight,
            (
                self._member_group,
                np.searchsorted(self._cpu_values, self._cpu_ask) + 1,
                np.searchsorted(self._mem_values, self._mems) + 1,
            ),
            self._weights,
        )
        # laid out (CPU rank x memory rank, group): one lookup per (node, shape) reads a row
        self._mem_ranks = len(self._mem_values) + 1
        self._fit_weight = np.ascontiguousarray(
            fit_weight.cumsum(axis=1).cumsum(axis=2).transpose(1, 2, 0)
        ).reshape((len(self._cpu_values) + 1) * self._mem_ranks, len(parts))
        self._cards = CardTables(need, self._count, self._slices)
        self._group_milli = self._count * MILLI
        self._mem_divisor = np.maximum(self._mems, 1)
        self._mem_unbounded = np.where(self._mems > 0, 0, never)
        cards = snap.present.sum(axis=1).astype(np.float64) * MILLI
        # the node's own CPU per milli of card: its CPU for a free share is that times the share
        self._cpu_per_share = np.divide(
            snap.cpu_cap, cards, out=np.zeros_like(cards), where=cards > 0
        )
        self.node_kind = kinds(need.transpose(1, 0, 2), self._cpu_per_share)

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
        cards = self._cards.read(rows, share_free)
        # whole-card shapes (a card holds 0 or 1): groups of `count` free cards; slices: every
        # slice that fits a card, in tasks of `count` slices
        instances = cards.tasks // self._count
        used = np.where(self._whole, instances * self._group_milli, cards.used)  # (B, S)
        if len(self._multi_slices):
            used[:, self._multi_slices] = self._multi_slice_used(cards, instances)
        # (B, M): the fraction of its group's instances the node's CPU and memory allow, per shape
        g = self._member_group
        inst = instances[:, g]
        per_inst = np.maximum(inst, 1)
        # A node's own CPU per card is not fragmentation: only CPU that allocation took faster
        # than cards, beyond the node's own ratio for its free cards, strands them. (floor(own)
        # // ask == own // ask for a whole ask, and integer division is several times faster)
        own = (self._cpu_per_share[rows] * total).astype(np.int64)
        asks = self._cpus
        gap = np.minimum(own[:, None] // asks, inst) - np.minimum(cpu_free[:, None] // asks, inst)
        scale = 1.0 - np.maximum(gap, 0.0) / per_inst
        if mem_free is not None:  # memory: an absolute bound (see the module's docstring)
            # shapes without a memory ask: a bound no node memory reaches (scale stays 1)
            fit = mem_free[:, None] // self._mem_divisor + self._mem_unbounded
            scale = np.minimum(scale, fit / per_inst)  # scale <= 1 already
        missed = self._missed_by_mix(cards, cpu_free, mem_free, inst, scale)
        strand = (total[:, None] - used[:, g] * scale) * missed * self._weights  # (B, M)
        per_group = np.add.reduceat(strand, self._group_start, axis=1)  # (B, S)
        # added in group order with a running sum: the same rounding for any batch of nodes
        terms = np.concatenate([(self.cpu_only_weight * total)[:, None], per_group], axis=1)
        return np.asarray(np.cumsum(terms, axis=1)[:, -1], dtype=np.float64)

    def _multi_slice_used(self, cards: NodeCards, instances: IntArray) -> IntArray:
        """(B, groups of several slices): the share the whole tasks use of the slices that fit.

        A task of k slices needs k distinct cards; counting tasks as the fitting slices // k
        overcounts only when one card holds more of them than the other cards together (an
        approximation kept for speed: no trace so far has such shapes)."""
        g = self._multi_slices
        slices = cards.tasks[:, g]
        whole_tasks = instances[:, g] * self._count[g]
        return np.asarray(cards.used[:, g] * whole_tasks // np.maximum(slices, 1), dtype=np.int64)

    def _missed_by_mix(
        self,
        cards: NodeCards,
        cpu_free: IntArray,
        mem_free: IntArray | None,
        inst: IntArray,
        scale: FloatArray,
    ) -> FloatArray:
        """(B, M): per shape m, the fraction of the target workload that could not take one more
        task in what a stream of m leaves on the node (the share it strands, and the CPU and
        memory its counted instances leave): that share is stranded only for them."""
        # (B, M): the instances the measure counts as used (the epsilon: scale is a quotient,
        # and 3 * (2/3) must give 2, not 1)
        taken = np.floor(inst * scale + 1e-9).astype(np.int64)
        # whether each group t finds its cards in what each member m's stream leaves: (B, M, T)
        # slice streams leave each card's remainder below one more slice (per slice group);
        # whole-card streams take whole free cards and leave the partial ones as they were (a
        # partial card never hosts a whole-card task, and a slice task takes one card)
        free_cards = cards.whole_free[:, None] - taken[:, self._whole_members] * self._cards_of
        whole = (free_cards[:, :, None] >= self._count) | cards.partial[:, None, :]
        # as floats: einsum then multiplies without casting (the same sums, faster)
        sources = np.concatenate([cards.after_slices, whole], axis=1).astype(np.float64)
        hosts = sources[:, self._hosts_row]
        # the weight of each group's shapes whose CPU and memory fit what is left: (B, M, T)
        left = cpu_free[:, None] - taken * self._cpu_ask
        rank = np.searchsorted(self._cpu_values, left, "right") * self._mem_ranks
        if mem_free is None:  # no memory bound: every shape fits
            rank += self._mem_ranks - 1
        else:
            rank += np.searchsorted(
                self._mem_values, mem_free[:, None] - taken * self._mems, "right"
            )
        hosted = np.einsum("bmt,bmt->bm", hosts, self._fit_weight[rank])
        return np.asarray(1.0 - hosted / self._weight_total, dtype=np.float64)
