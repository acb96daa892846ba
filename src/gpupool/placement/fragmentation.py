"""FGD's fragmentation measure (Weng et al., ATC'23), vectorised over nodes.

For a node and a task shape m: if the node cannot host m (too little CPU, no accessible card,
too few cards with enough free share) all its free GPU share counts as fragment; otherwise only
the cards whose free share is below m's per-card demand (or whose model m does not accept) count.
CPU-only shapes count all free GPU share. The node's fragmentation is the sum over shapes weighted
by their frequency. Shapes are grouped by their GPU part so the CPU test becomes one lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpupool.domain.requests import MILLI
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload

FloatArray = npt.NDArray[np.float64]
_NEVER = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, slots=True)
class _Group:
    threshold: IntArray  # (N, G) per-card share a shape of the group needs; _NEVER if inaccessible
    count: int
    cpu_sorted: IntArray  # CPU demands of the group's shapes, ascending
    weight_cum: FloatArray  # cumulative weight by cpu_sorted, with a leading 0
    weight_total: float


class NodeMeasure(Protocol):
    """A per-node fragmentation measure, evaluated for hypothetical node states."""

    def node_frag(self, rows: IntArray, cpu_free: IntArray, share_free: IntArray) -> FloatArray: ...


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
        for (milli, count, mem, compute, models), members in by_gpu.items():
            shape = Shape(0, milli, count, mem, compute, models)
            members.sort()
            cpus = np.array([c for c, _ in members], dtype=np.int64)
            cum = np.concatenate([[0.0], np.cumsum([w for _, w in members])])
            self.groups.append(
                _Group(
                    threshold=threshold(snap, shape),
                    count=count,
                    cpu_sorted=cpus,
                    weight_cum=cum,
                    weight_total=float(cum[-1]),
                )
            )

    def node_frag(self, rows: IntArray, cpu_free: IntArray, share_free: IntArray) -> FloatArray:
        """Fragmentation of nodes `rows` if they had `cpu_free` (B,) and `share_free` (B, G)."""
        total = share_free.sum(axis=1).astype(np.float64)
        frag = self.cpu_only_weight * total
        for grp in self.groups:
            ok = share_free >= grp.threshold[rows]
            hostable = ok.sum(axis=1) >= grp.count
            partial = np.where(ok, 0, share_free).sum(axis=1)
            fits_cpu = grp.weight_cum[np.searchsorted(grp.cpu_sorted, cpu_free, side="right")]
            frag += fits_cpu * np.where(hostable, partial, total)
            frag += (grp.weight_total - fits_cpu) * total
        return np.asarray(frag, dtype=np.float64)

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
