"""FGD's fragmentation measure (Weng et al., ATC'23), vectorised over nodes; and below it, the
per-card fragmentation operators read (`card_fragmentation`), which defragmentation acts on.

For a node and a task shape m: if the node cannot host m (too little CPU, no accessible card,
too few cards with enough free share) all its free GPU share counts as fragment; otherwise only
the cards whose free share is below m's per-card demand (or whose model m does not accept) count.
CPU-only shapes count all free GPU share. The node's fragmentation is the sum over shapes weighted
by their frequency. Shapes are grouped by their GPU part so the CPU test becomes one lookup.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpupool.domain.errors import InvalidRequest
from gpupool.domain.requests import MILLI, Request
from gpupool.placement.cardtables import SHARES, card_kinds
from gpupool.placement.rows import kinds
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload

FloatArray = npt.NDArray[np.float64]
_NEVER = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, slots=True)
class _Group:
    count: int
    cpu_sorted: IntArray  # CPU demands of the group's shapes, ascending
    weight_cum: FloatArray  # cumulative weight by cpu_sorted, with a leading 0
    weight_total: float


class NodeMeasure(Protocol):
    """A per-node fragmentation measure, evaluated for hypothetical node states."""

    # (N,): nodes of one kind measure alike in equal states (free CPU, memory and share), so a
    # batch measures each distinct (kind, state) once (FragCache)
    node_kind: IntArray

    def node_frag(
        self,
        rows: IntArray,
        cpu_free: IntArray,
        share_free: IntArray,
        mem_free: IntArray | None = None,
    ) -> FloatArray:
        """Per node of `rows`, its measure if it had `cpu_free` (B,), `share_free` (B, G) and
        `mem_free` (B,) MiB of node memory (None: memory does not bound it)."""
        ...


class FragmentationModel:
    """The measure bound to one snapshot's cards and one target workload."""

    def __init__(self, snap: ClusterSnapshot, workload: TargetWorkload) -> None:
        self.workload = workload
        self.cpu_only_weight = 0.0
        by_gpu: dict[tuple[int, int, int, int, tuple[str, ...]], list[tuple[int, float]]] = {}
        for shape, weight in zip(workload.shapes, workload.weights, strict=True):
            if not shape.wants_gpu:
                self.cpu_only_weight += weight
                continue
            key = (
                shape.gpu_milli,
                shape.gpu_count,
                shape.gpu_memory_bytes,
                shape.compute_milli,
                shape.models,
            )
            by_gpu.setdefault(key, []).append((shape.cpu_milli, weight))
        self.groups: list[_Group] = []
        needs: list[IntArray] = []  # per group (N, G): the share it needs per card; _NEVER if not
        for (milli, count, mem, compute, models), members in by_gpu.items():
            shape = Shape(0, milli, count, mem, compute, models)
            members.sort()
            cpus = np.array([c for c, _ in members], dtype=np.int64)
            cum = np.concatenate([[0.0], np.cumsum([w for _, w in members])])
            needs.append(threshold(snap, shape))
            self.groups.append(
                _Group(
                    count=count,
                    cpu_sorted=cpus,
                    weight_cum=cum,
                    weight_total=float(cum[-1]),
                )
            )

        # The groups stacked, so that one pass of array operations measures every group:
        # GPU counts (S,), and a table of each group's CPU-fitting weight by the rank of a
        # node's free CPU among every group's CPU demands (one searchsorted).
        need = np.stack(needs) if needs else np.zeros((0, *snap.present.shape), dtype=np.int64)
        self._count = np.array([g.count for g in self.groups], dtype=np.int64)[:, None]
        self._weight_total = np.array([g.weight_total for g in self.groups])[:, None]
        cuts = np.unique(
            np.concatenate([g.cpu_sorted for g in self.groups] or [np.zeros(0, dtype=np.int64)])
        )
        self._cpu_cuts = cuts.astype(np.int64)
        self._fits_cpu = np.array(
            [
                g.weight_cum[np.searchsorted(g.cpu_sorted, np.concatenate([[-1], cuts]), "right")]
                for g in self.groups
            ]
        ).reshape(len(self.groups), len(cuts) + 1)
        self.node_kind = kinds(need.transpose(1, 0, 2))
        # per (card kind, free share), per group: whether the card fits one task, and the share
        # that is a fragment when the node can host the group (the card's, where it does not
        # fit), so that a node's figures are one lookup per card and a sum (K, 1001, S, 2)
        self._card_kind, kind_needs = card_kinds(need)
        fits = SHARES[None, :, None] >= kind_needs[:, None, :]
        self._per_card = np.stack(  # int16 (at most 1000): small enough to stay in cache
            [fits, np.where(fits, 0, SHARES[None, :, None])], axis=-1
        ).astype(np.int16)

    def node_frag(
        self,
        rows: IntArray,
        cpu_free: IntArray,
        share_free: IntArray,
        mem_free: IntArray | None = None,
    ) -> FloatArray:
        """Fragmentation of nodes `rows` if they had `cpu_free` (B,) and `share_free` (B, G);
        node memory is not part of FGD's measure (`mem_free` is ignored).

        Per group: fits_cpu x (the partial cards if the node can host the group, else all its
        free share) + the rest of the group's weight x all its free share; the terms are added
        in group order with a running sum (cumsum), the same rounding for any batch of nodes.
        """
        total = share_free.sum(axis=1).astype(np.float64)
        s = len(self.groups)
        if not s:
            return np.asarray(self.cpu_only_weight * total, dtype=np.float64)
        per_node = self._per_card[self._card_kind[rows], share_free].sum(axis=1)  # (B, S, 2)
        hostable = self._count <= per_node[..., 0].T
        partial = per_node[..., 1].T
        fits_cpu = self._fits_cpu[:, np.searchsorted(self._cpu_cuts, cpu_free, side="right")]
        terms = np.empty((2 * s + 1, len(rows)))
        terms[0] = self.cpu_only_weight * total
        terms[1::2] = fits_cpu * np.where(hostable, partial, total)
        terms[2::2] = (self._weight_total - fits_cpu) * total
        return np.asarray(np.cumsum(terms, axis=0)[-1], dtype=np.float64)

    def cluster_frag(self, snap: ClusterSnapshot) -> float:
        rows = np.arange(len(snap))
        return float(self.node_frag(rows, snap.cpu_free, snap.share_free).sum())


def threshold(snap: ClusterSnapshot, shape: Shape) -> IntArray:
    """Per card, the free share one task of `shape` needs there; huge where it cannot go."""
    accessible: BoolArray = snap.present.copy()
    if shape.models:
        ids = [snap.model_ids[m] for m in shape.models if m in snap.model_ids]
        accessible &= np.isin(snap.model_id, ids)
    if shape.gpu_milli:
        need = np.full(snap.present.shape, shape.gpu_milli, dtype=np.int64)
    else:
        total = np.maximum(snap.gmem_total, 1)
        mem_share = -(-shape.gpu_memory_bytes * MILLI // total)
        need = np.maximum(mem_share, shape.compute_milli)
        accessible &= snap.mem_known
    return np.where(accessible, need, _NEVER)


# ---- fragmentation as operators read it -----------------------------------------------------
#
# FGD's measure above is an expectation over the target workload per *node* (CPU included, in
# milli-GPU of free share) and is what placement descends. Operators read a simpler figure per
# *card*: of the card's memory, how much is free yet useless to the requests the pool actually
# gets. That figure is FGD's per-GPU term made standalone: for each common request size s, the
# card's free memory counts as fragment when s does not fit in it (too little free memory, or too
# little free compute for s's compute share); the card's fragmentation is the frequency-weighted
# sum over the sizes, divided by the card's memory. Differences from FGD's node measure: no CPU
# test and no "the node cannot host it at all" clause (a card stands alone), memory rather than
# the smaller of memory and compute share, and the sizes are learnt from recent leases, not the
# trace's target workload. An empty card has fragmentation 0 (every size that fits the card fits
# it); a full one has 0 too (nothing is free). Sizes larger than a card, and byte sizes on cards
# whose memory is unknown, do not apply to that card (it is not fragmentation that they never fit
# there); the weights are renormalised over the sizes that apply.

DEFAULT_SIZE_COVERAGE = 0.9


@dataclass(frozen=True, slots=True, order=True)
class CardSize:
    """One request's per-card demand: a share of the card (milli, 1000 = the whole card) or a
    number of bytes, with the compute share it reserves (milli of the card's SMs)."""

    share_milli: int  # 0 for byte sizes
    size_bytes: int  # 0 for share sizes
    compute_milli: int

    @classmethod
    def of(cls, req: Request) -> CardSize | None:
        """The per-card size of a GPU request (None for CPU-only requests)."""
        if not req.wants_gpu:
            return None
        if req.whole_cards:
            return cls(MILLI, 0, MILLI)
        if req.gpu_milli is not None:
            return cls(req.gpu_milli, 0, req.gpu_milli)
        return cls(0, req.gpu_memory_bytes or 0, req.compute_milli)


@dataclass(frozen=True, slots=True)
class CommonSizes:
    """The per-card sizes that make up most of the recent requests, with their frequencies.

    Rule (`learn`): count each recent GPU request's per-card size; take the sizes most frequent
    first (equal counts: smaller first) until they cover `coverage` of the requests (90% by
    default, the same kind of popularity cut-off as FGD's target workload); weights are the
    counts renormalised over the kept sizes."""

    sizes: tuple[CardSize, ...]
    weights: tuple[float, ...]

    @classmethod
    def learn(
        cls, recent: Iterable[Request], coverage: float = DEFAULT_SIZE_COVERAGE
    ) -> CommonSizes:
        if not 0 < coverage <= 1:
            raise InvalidRequest(f"size coverage must be in (0, 1]; got {coverage}")
        counts = Counter(s for s in (CardSize.of(r) for r in recent) if s is not None)
        total = sum(counts.values())
        kept: list[tuple[CardSize, int]] = []
        running = 0
        for size, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if running >= coverage * total:
                break
            kept.append((size, count))
            running += count
        return cls(tuple(s for s, _ in kept), tuple(c / running for _, c in kept))

    def __bool__(self) -> bool:
        return bool(self.sizes)


def card_fragmentation(
    free: IntArray,
    compute_free: IntArray,
    total: IntArray,
    mem_known: BoolArray,
    sizes: CommonSizes,
) -> FloatArray:
    """Per card (any shape of arrays, all alike): free memory the common sizes cannot use, as a
    fraction of the card's memory (0..1). Unknown-memory cards carry abstract units (the
    snapshot's 1000), which share sizes scale to and byte sizes do not apply to."""
    if not sizes:
        return np.zeros(free.shape, dtype=np.float64)
    share = np.array([s.share_milli for s in sizes.sizes], dtype=np.int64)
    size_bytes = np.array([s.size_bytes for s in sizes.sizes], dtype=np.int64)
    compute = np.array([s.compute_milli for s in sizes.sizes], dtype=np.int64)
    weight = np.array(sizes.weights, dtype=np.float64)
    is_share = share > 0
    tot = total[..., None]
    need = np.where(is_share, tot * share // MILLI, size_bytes)  # (..., S)
    applies = (need <= tot) & (is_share | mem_known[..., None])
    blocked = (free[..., None] < need) | (compute_free[..., None] < compute)
    w = np.where(applies, weight, 0.0)
    w_sum = w.sum(axis=-1)
    unusable = np.where(w_sum > 0, (w * blocked).sum(axis=-1) / np.maximum(w_sum, 1e-12), 0.0)
    return np.asarray(unusable * free / np.maximum(total, 1), dtype=np.float64)


def snapshot_fragmentation(snap: ClusterSnapshot, sizes: CommonSizes) -> FloatArray:
    """(N, G) per-card fragmentation of a snapshot (0 where no card is present)."""
    frag = card_fragmentation(
        snap.gmem_free, snap.comp_free, snap.gmem_total, snap.mem_known, sizes
    )
    return np.where(snap.present, frag, 0.0)


def pool_fragmentation(snap: ClusterSnapshot, sizes: CommonSizes) -> float:
    """The pool's fragmentation: the mean over its healthy cards of each card's fraction (each card
    counts once, so cards of unknown memory mix with the rest; on a pool of one model this is the
    unusable free bytes over the pool's bytes). 0 for a pool without healthy cards."""
    cards = snap.present & snap.healthy
    if not cards.any():
        return 0.0
    return float(snapshot_fragmentation(snap, sizes)[cards].mean())


def in_use_fragmentation(snap: ClusterSnapshot, sizes: CommonSizes) -> float:
    """The same mean over the healthy cards that hold at least one slice: what an operator
    looking at the busy cards sees, undiluted by idle cards (0 when no card is in use)."""
    used = (snap.gmem_free < snap.gmem_total) | (snap.comp_free < MILLI)
    cards = snap.present & snap.healthy & used
    if not cards.any():
        return 0.0
    return float(snapshot_fragmentation(snap, sizes)[cards].mean())
