"""What a scorer sees: the request, the feasible nodes, and each one's state after placement."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.placement.cards import best_fit_cards
from gpupool.placement.filters import Feasibility
from gpupool.placement.snapshot import ClusterSnapshot, IntArray
from gpupool.placement.workload import Shape


class PlanContext:
    def __init__(
        self, snap: ClusterSnapshot, req: Request, feas: Feasibility, rows: IntArray
    ) -> None:
        self.snap = snap
        self.req = req
        self.feas = feas
        self.rows = rows  # candidate node indexes

    @cached_property
    def shape(self) -> Shape:
        """The request's shape (what the scorers' caches are keyed by)."""
        return Shape.of(self.req)

    @cached_property
    def cards(self) -> IntArray:
        """(B, k) slots each candidate would use."""
        if not self.req.wants_gpu:
            return np.zeros((len(self.rows), 0), dtype=np.int64)
        return best_fit_cards(self.snap, self.req, self.feas, self.rows)

    @cached_property
    def cpu_after(self) -> IntArray:
        return self.snap.cpu_free[self.rows] - self.req.cpu_milli

    @cached_property
    def mem_after(self) -> IntArray:
        """Free node memory (MiB) after placing on each candidate."""
        return self.snap.mem_free[self.rows] - self.req.memory_mib

    @cached_property
    def share_after(self) -> IntArray:
        """(B, G) free share per card after placing on each candidate."""
        snap, rows = self.snap, self.rows
        share = snap.share_free[rows].copy()
        if not self.req.wants_gpu:
            return share
        b = np.arange(len(rows))
        if self.req.whole_cards:
            share[b[:, None], self.cards] = 0
            return share
        # a slice on each chosen card: read its figures at flat indexes (faster than pairs of
        # indexes); one column for most requests
        for column in range(self.cards.shape[1]):
            card = self.cards[:, column]
            at = rows * snap.slots + card
            comp = snap.comp_free.ravel()[at] - self.feas.demand.compute
            mem = snap.gmem_free.ravel()[at] - self.feas.demand.mem.ravel()[at]
            total = np.maximum(snap.gmem_total.ravel()[at], 1)
            share[b, card] = np.minimum(comp, mem * MILLI // total)
        return share
