"""Which cards on a node a request takes.

Slices go to the best-fitting card (least free share that suffices, lowest index on ties), which
keeps large holes intact. Whole-card requests take free cards from one NVLink domain when one has
enough, else from one NUMA node, else the lowest indexes; a request for a slice on each of several
cards prefers one NVLink domain and then one NUMA node the same way, and within it the
best-fitting cards.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from gpupool.domain.requests import Request
from gpupool.placement.filters import Feasibility
from gpupool.placement.snapshot import ClusterSnapshot, IntArray

_BIG = np.iinfo(np.int64).max


def best_fit_cards(
    snap: ClusterSnapshot, req: Request, feas: Feasibility, rows: IntArray
) -> IntArray:
    """(B, k) slots per candidate row, for scoring: best-fit slice, or the first k free cards."""
    fit = feas.card_fit[rows]
    if req.whole_cards:
        k = req.gpu_count
        if k == 1:  # the first fitting card (what the sort below gives, for one)
            return np.asarray(np.argmax(fit, axis=1)[:, None], dtype=np.int64)
        # Stable sort puts fitting cards first, in index order.
        order = np.argsort(~fit, axis=1, kind="stable")
        return np.asarray(order[:, :k], dtype=np.int64)
    key = np.where(fit, _fit_key(snap, req)[rows], _BIG)
    if req.gpu_count == 1:
        return np.asarray(np.argmin(key, axis=1)[:, None], dtype=np.int64)
    # a slice on each of k cards: the k best-fitting ones (fitting cards sort first)
    order = np.argsort(key, axis=1, kind="stable")
    return np.asarray(order[:, : req.gpu_count], dtype=np.int64)


def _fit_key(snap: ClusterSnapshot, req: Request) -> IntArray:
    """What best fit ranks a slice's cards by: free share for shares, free bytes for bytes."""
    return snap.share_free if req.gpu_milli is not None else snap.gmem_free


def topology_cards(
    snap: ClusterSnapshot, req: Request, feas: Feasibility, i: int
) -> tuple[int, ...]:
    """The cards on node i for a request of several: whole cards in index order, slices
    best-fitting first; from one NVLink domain if one has enough, else one NUMA node."""
    k = req.gpu_count
    free = [int(s) for s in np.flatnonzero(feas.card_fit[i])]
    if not req.whole_cards:
        key = _fit_key(snap, req)[i]
        free.sort(key=lambda s: (int(key[s]), s))
    if k <= 1 or len(free) == k:
        return tuple(free[:k])
    for key in (snap.nvlink[i], snap.numa[i]):
        groups: dict[int, list[int]] = defaultdict(list)
        for s in free:
            if key[s] >= 0:
                groups[int(key[s])].append(s)
        fitting = [g for g in groups.values() if len(g) >= k]
        if fitting:
            # The tightest group that fits leaves bigger groups for bigger requests.
            best = min(fitting, key=lambda g: (len(g), g[0]))
            return tuple(best[:k])
    return tuple(free[:k])
