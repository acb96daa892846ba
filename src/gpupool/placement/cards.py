"""Which cards on a node a request takes.

Slices go to the best-fitting card (least free share that suffices, lowest index on ties), which
keeps large holes intact. Whole-card requests take free cards from one NVLink domain when one has
enough, else from one NUMA node, else the lowest indexes.
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
    key_source = snap.share_free if req.gpu_milli is not None else snap.gmem_free
    key = np.where(fit, key_source[rows], _BIG)
    return np.asarray(np.argmin(key, axis=1)[:, None], dtype=np.int64)


def topology_cards(
    snap: ClusterSnapshot, req: Request, feas: Feasibility, i: int
) -> tuple[int, ...]:
    """Whole cards on node i, preferring one NVLink domain, then one NUMA node."""
    k = req.gpu_count
    free = [int(s) for s in np.flatnonzero(feas.card_fit[i])]
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
