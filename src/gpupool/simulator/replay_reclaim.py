"""Reclaim for room in the replay: the placement what-if behind `plan_site_reclaim`.

A lender's pod admitted by quota may still find no card because borrowers hold the capacity.
`room_plan` asks the pure planner for borrowed victims on one node whose eviction lets the pod fit
there. The what-if is exact: the victims' placement decisions are forgotten on the snapshot, the
placement filters are asked whether the pod now fits on that node, and the decisions are assumed
back (assume and forget are exact inverses, so the snapshot is left as it was). Nodes held for
another claimant, and nodes the pod could never use (wrong model, too few or too small cards),
are not considered.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from gpupool.domain.requests import Request
from gpupool.placement import ClusterSnapshot, Decision
from gpupool.placement.filters import UNRESOLVABLE, Reason, feasibility
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import NoReclaim
from gpupool.quota.reclaim_sites import SitePlan, plan_site_reclaim
from gpupool.simulator.replay_placement import fits_node, shape_of

_UNRESOLVABLE = np.array(sorted(int(r) for r in UNRESOLVABLE), dtype=np.int64)
HELD = "held for a reclaim"


def fits_without(snap: ClusterSnapshot, node: int, req: Request, gone: Sequence[Decision]) -> bool:
    """Whether `req` fits on `node` once the placements `gone` have ended (snapshot unchanged)."""
    here = [d for d in gone if d.node_index == node]
    for decision in here:
        snap.forget(decision)
    try:
        if not fits_node(snap, node, shape_of(req)):
            return False
        return int(feasibility(snap, req).reason[node]) == int(Reason.FITS)
    finally:
        for decision in reversed(here):
            snap.assume(decision)


def room_plan(
    snap: ClusterSnapshot,
    ledger: Ledger,
    decision_of: Callable[[str], Decision | None],
    held: Collection[int],
    req: Request,
    tenant: str,
    now: float,
    needed: int = 0,
    pending: Collection[str] = (),
) -> SitePlan[int] | NoReclaim:
    """Victims whose eviction lets `req` (of `tenant`) fit on one node, via `plan_site_reclaim`."""
    usable = ~np.isin(feasibility(snap, req).reason, _UNRESOLVABLE)

    def site_of(lease: Lease) -> int | None:
        decision = decision_of(lease.id)
        if decision is None:
            return None
        node = decision.node_index
        return node if usable[node] and node not in held else None

    def fits(node: int, gone: Sequence[Lease]) -> bool:
        decisions = [d for d in (decision_of(le.id) for le in gone) if d is not None]
        return fits_without(snap, node, req, decisions)

    return plan_site_reclaim(ledger, tenant, site_of, fits, now, needed, pending)
