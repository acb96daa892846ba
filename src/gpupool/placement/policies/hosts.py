"""Host reserves: the free GPU share that tasks only few nodes can host will need there.

A task can run only on nodes big enough for it: enough cards for its GPUs, enough CPU and memory
for its asks. Most tasks fit most nodes, but some fit only a few: on the Alibaba cluster an
8-GPU task asking 120 cores and 625-720 GiB fits only the 39 G3 nodes (128 cores, 768 GiB), an
8-GPU task only the 8-card nodes, a 4-GPU task asking 313 GiB only nodes with that much memory.
A task that could have gone elsewhere and takes such a node's share takes a place one of those
tasks will be refused later. FGD's one-step measure partly sees this (a node that cannot host a
shape counts all its free share as fragment for it, which pulls other tasks to such nodes), but
any measure that prefers a big node for its own reasons overrides it: a variant of gpupool that
judged CPU by the workload's mix put 4-GPU tasks on G3 and refused the 120-core tasks from half
load on, where FGD refuses them only once G3 is full (70-80%).

The idea is model reserves' (reserve.py) with the set of models replaced by the set of nodes that
could host a shape when empty (its *host set*, fixed by the nodes' sizes). Of the target
workload's GPU load a fraction f_S has host set S; whatever fills the cluster's remaining free
share F will contain, in expectation, f_S x F that can go only to S: S's reserve, a fraction
p_S = f_S x F / free(S) of each of its nodes' free share. A request whose own host set is A
competes only with the narrower sets (S inside A, S not A): tasks of A or of broader sets could go
where it goes or elsewhere. On a node, the reserved fraction for it is the sum of p_S over the
narrower sets holding the node; the surplus is summed over the nodes that belong to the same
narrower sets (as reserve.py sums over a model's cards: room anywhere among equals is room), and
the request's cost is the part of its share beyond that surplus (0 while there is surplus, all of
it once the nodes are down to their reserve). The cost is expected refused GPU share in milli-GPU,
FGD's unit, so it is subtracted from the fragmentation delta with no weight, as model reserves
are. It shrinks as the cluster fills, so no node is held for demand that cannot arrive before the
cluster is full. Models are left out of host sets: a model restriction is priced by reserve.py,
and counting it twice would double its price.

On a workload whose shapes all fit every node (the shared lists' GPU tasks mostly do) the only
narrower sets are those of the few large tasks, and their reserves bind only where those tasks
are a large part of the load.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.requests import MILLI
from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape, TargetWorkload


def host_set(snap: ClusterSnapshot, shape: Shape, memory_mib: int) -> BoolArray:
    """The nodes that could host one task of `shape` when empty (cards, CPU, memory)."""
    cards = snap.present.sum(axis=1)
    return np.asarray(
        (cards >= shape.gpu_count)
        & (snap.cpu_cap >= shape.cpu_milli)
        & (snap.mem_cap >= memory_mib),
        dtype=bool,
    )


class HostReserve:
    """Host reserves of one target workload on one snapshot's nodes."""

    def __init__(self, snap: ClusterSnapshot, workload: TargetWorkload) -> None:
        self.uid = snap.uid
        sets: dict[bytes, tuple[BoolArray, float]] = {}
        total = 0.0
        for k, (shape, weight) in enumerate(zip(workload.shapes, workload.weights, strict=True)):
            if not shape.wants_gpu:
                continue
            hosts = host_set(snap, shape, workload.memory_of(k))
            load = weight * shape.gpu_load
            total += load
            mask, before = sets.get(hosts.tobytes(), (hosts, 0.0))
            sets[hosts.tobytes()] = (mask, before + load)
        self.sets = np.array([m for m, _ in sets.values()], dtype=bool).reshape(-1, len(snap))
        self.fractions = np.array([load / total for _, load in sets.values()]) if total else None
        # per request (shape, memory): its narrower sets' fractions, each cell's membership of
        # them (as floats, for the products below) and the cell of each node
        self._narrow: dict[tuple[Shape, int], tuple[FloatArray, FloatArray, IntArray]] = {}
        # per node, the free share of its healthy cards, and the node version it was summed at
        self._free = np.zeros(len(snap))
        self._free_version = np.full(len(snap), -1, dtype=np.int64)

    def narrower(
        self, snap: ClusterSnapshot, shape: Shape, memory_mib: int
    ) -> tuple[FloatArray, FloatArray, IntArray]:
        """The sets strictly inside the request's host set (their fractions), and each node's
        cell with the cells' members (sets x cells): nodes in the same cell belong to the same
        ones of those sets, so every per-node figure below is one per cell."""
        key = (shape, memory_mib)
        found = self._narrow.get(key)
        if found is None:
            mine = host_set(snap, shape, memory_mib)
            inside = ~(self.sets & ~mine).any(axis=1)
            same = (self.sets == mine).all(axis=1)
            sets = np.flatnonzero(inside & ~same)
            fractions = (
                self.fractions[sets] if self.fractions is not None else np.zeros(0)
            ).astype(np.float64)
            member = np.packbits(self.sets[sets], axis=0).T  # (N, bytes)
            first, cell = np.unique(member, axis=0, return_index=True, return_inverse=True)[1:]
            cell_members = self.sets[sets][:, first].astype(np.float64)  # (K, cells)
            found = (fractions, cell_members, cell.reshape(-1).astype(np.int64))
            self._narrow[key] = found
        return found

    def free(self, snap: ClusterSnapshot) -> FloatArray:
        """Per node, the free share of its healthy cards; only nodes changed since are summed."""
        stale = np.flatnonzero(self._free_version != snap.version)
        if len(stale):
            cards = np.where(snap.healthy[stale], snap.share_free[stale], 0)
            self._free[stale] = cards.sum(axis=1)
            self._free_version[stale] = snap.version[stale]
        return self._free

    def cost(self, ctx: PlanContext) -> FloatArray:
        """Per candidate, the milli-GPU the request would take out of narrower host reserves."""
        req, rows, snap = ctx.req, ctx.rows, ctx.snap
        if self.fractions is None or not req.wants_gpu or len(rows) == 0:
            return np.zeros(len(rows))
        fractions, members, cell = self.narrower(snap, ctx.shape, req.memory_mib)
        if len(fractions) == 0:
            return np.zeros(len(rows))
        free = self.free(snap)
        cell_free = np.bincount(cell, weights=free, minlength=members.shape[1])
        in_set = members @ cell_free
        pressure = fractions * free.sum() / np.maximum(in_set, 1.0)
        reserved = pressure @ members  # per cell, the fraction of its free share reserved
        surplus = np.maximum(cell_free * (1.0 - reserved), 0.0)[cell[rows]]
        # The share taken is at most the request's cards; only where the surplus is smaller is
        # it worked out (the cards on each candidate: as costly as scoring, so only there).
        cost = np.zeros(len(rows))
        short = np.flatnonzero(surplus < req.gpu_count * MILLI)
        if len(short):
            sub = PlanContext(snap, req, ctx.feas, rows[short])
            taken = (snap.share_free[sub.rows].sum(axis=1) - sub.share_after.sum(axis=1)).astype(
                np.float64
            )
            cost[short] = np.clip(taken - surplus[short], 0.0, taken)
        return cost
