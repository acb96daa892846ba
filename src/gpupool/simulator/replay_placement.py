"""Placement for the replay: the planner's choice, with a cheap "cannot fit" path.

A replay asks the planner again and again for pods that do not fit yet. `Planner.plan` explains
each refusal in words (a per-node reason count), which a busy replay cannot afford; `place` asks
for the same scores and the same choice, and on refusal only says whether the pod could ever fit.
`fits_node` tells, from one node's free figures, whether a request shape that failed could fit
there now, so a departure re-opens only the shapes that the freed node can take.
"""

from __future__ import annotations

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.placement import ClusterSnapshot, Decision, Planner
from gpupool.placement.filters import UNRESOLVABLE, Reason

_UNRESOLVABLE = np.array(sorted(int(r) for r in UNRESOLVABLE), dtype=np.int64)

Shape = tuple[int, int, int, int | None, int | None]


def shape_of(req: Request) -> Shape:
    return (req.cpu_milli, req.memory_mib, req.gpu_count, req.gpu_milli, req.gpu_memory_bytes)


def place(planner: Planner, snap: ClusterSnapshot, req: Request) -> Decision | bool:
    """The planner's decision, or whether the request could never fit (True: unresolvable)."""
    feas, rows, scores = planner.scores(snap, req)
    if len(rows) == 0:
        failing = feas.reason[feas.reason != int(Reason.FITS)]
        return bool(len(snap)) and bool(np.isin(failing, _UNRESOLVABLE).all())
    best = scores.max()
    tied = np.flatnonzero(scores == best)
    pick = int(tied[np.argmin(planner.rank(snap)[rows[tied]])])
    return planner.decide(snap, req, feas, int(rows[pick]), float(best))


def fits_node(snap: ClusterSnapshot, i: int, shape: Shape) -> bool:
    """Whether node i has room now for `shape` by CPU, memory and free cards (a quick upper
    bound: model and health are left to the planner)."""
    cpu, mem, count, milli, mem_bytes = shape
    if snap.cpu_free[i] < cpu or snap.mem_free[i] < mem:
        return False
    if count == 0:
        return True
    if mem_bytes is not None:
        return True
    if count == 1 and milli is not None and milli < MILLI:
        return bool((snap.share_free[i] >= milli).any())
    return int(snap.fully_free()[i].sum()) >= count
