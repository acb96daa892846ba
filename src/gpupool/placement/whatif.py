"""What-if questions on a placement snapshot, touching nothing: would a request fit on a node once
some placements there have ended? Used by reclaim for room (the simulator's replay and the live
controller ask the same questions of the same snapshot code).

`fits_without` is exact: the placements are forgotten on the snapshot, the placement filters are
asked, and the placements are assumed back (assume and forget are exact inverses, so the snapshot
is left as it was). `room_bound` is a quick arithmetic upper bound asked first. `UsableNodes`
says which nodes a request could ever use (no eviction cures a wrong model or too few cards).
`place_together` asks whether several requests (a gang) fit at once: each is placed with the
planner and assumed before the next, so no two take the same room, then all are forgotten;
`room_for` (the autoscaler's) is how many copies of one request fit that way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.placement.filters import UNRESOLVABLE, Reason, feasibility
from gpupool.placement.planner import Planner
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, Decision

_UNRESOLVABLE = np.array(sorted(int(r) for r in UNRESOLVABLE), dtype=np.int64)


def room_bound(snap: ClusterSnapshot, node: int, req: Request, here: Sequence[Decision]) -> bool:
    """Quick upper bound, touching nothing: could `req` fit on `node` once `here` (placements on
    that node) have ended, by CPU, memory and card room? (Models and health are left to the
    filters.)"""
    cpu = int(snap.cpu_free[node]) + sum(d.request.cpu_milli for d in here)
    mem = int(snap.mem_free[node]) + sum(d.request.memory_mib for d in here)
    if cpu < req.cpu_milli or mem < req.memory_mib:
        return False
    if not req.wants_gpu:
        return True
    gmem: list[int] = snap.gmem_free[node].tolist()
    comp: list[int] = snap.comp_free[node].tolist()
    for decision in here:
        for card, size, compute in zip(
            decision.cards, decision.mem_bytes, decision.compute_milli, strict=True
        ):
            gmem[card] += size
            comp[card] += compute
    total: list[int] = snap.gmem_total[node].tolist()
    cards = [k for k, present in enumerate(snap.present[node].tolist()) if present]
    if req.whole_cards:
        whole = sum(1 for k in cards if comp[k] == MILLI and gmem[k] == total[k])
        return whole >= req.gpu_count
    if req.gpu_milli is not None:
        room = sum(
            1
            for k in cards
            if gmem[k] >= total[k] * req.gpu_milli // MILLI and comp[k] >= req.gpu_milli
        )
    else:
        size = req.gpu_memory_bytes or 0
        room = sum(1 for k in cards if gmem[k] >= size and comp[k] >= req.compute_milli)
    return room >= req.gpu_count  # a slice on each of gpu_count cards


def fits_without(snap: ClusterSnapshot, node: int, req: Request, gone: Sequence[Decision]) -> bool:
    """Whether `req` fits on `node` once the placements `gone` have ended (snapshot unchanged)."""
    here = [d for d in gone if d.node_index == node]
    if not room_bound(snap, node, req, here):
        return False
    for decision in here:
        snap.forget(decision)
    try:
        return int(feasibility(snap, req).reason[node]) == int(Reason.FITS)
    finally:
        for decision in reversed(here):
            snap.assume(decision)


class UsableNodes:
    """Per request kind, the nodes it could ever use: those the filters do not reject for a
    reason no eviction cures (wrong model, too few or too small cards). Static, so cached."""

    def __init__(self) -> None:
        self._cache: dict[tuple[object, ...], BoolArray] = {}

    def __call__(self, snap: ClusterSnapshot, req: Request) -> BoolArray:
        key = (snap.uid, req.models, req.gpu_count, req.gpu_milli is None, req.gpu_memory_bytes)
        usable = self._cache.get(key)
        if usable is None:
            usable = ~np.isin(feasibility(snap, req).reason, _UNRESOLVABLE)
            self._cache[key] = usable
        return usable


def place_together(
    planner: Planner, snap: ClusterSnapshot, reqs: Sequence[Request]
) -> tuple[Decision, ...] | int:
    """Where each of `reqs` would go if placed one after another (each assumed before the next
    is planned), or the index of the first that fits nowhere then. The snapshot is left as it
    was (assume and forget are exact inverses)."""
    placed: list[Decision] = []
    try:
        for k, req in enumerate(reqs):
            decision = planner.plan(snap, req)
            if not isinstance(decision, Decision):
                return k
            snap.assume(decision)
            placed.append(decision)
        return tuple(placed)
    finally:
        for decision in reversed(placed):
            snap.forget(decision)


def room_for(snap: ClusterSnapshot, req: Request, count: int, policy: str = "binpack") -> int:
    """How many of `count` more copies of `req` the cards can host now, placed one after the
    other by the planner (packed tightly by default: the most that can fit, whatever the
    extender's policy; snapshot unchanged). The autoscaler asks it before a step up."""
    placed = place_together(Planner(policy), snap, [req] * count)
    return count if isinstance(placed, tuple) else placed
