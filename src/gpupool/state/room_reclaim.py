"""Reclaim for room on a placement snapshot: the what-if behind `plan_site_reclaim`, shared by the
simulator's replay and the live reclaim controller (one decision, not two forks of it).

A lender's pod admitted by quota may still find no card because borrowers hold the capacity.
`room_plan` asks the pure planner for borrowed victims on one node whose eviction lets the pod fit
there, with the exact what-if of `placement.whatif.fits_without`. Nodes held for another claimant
(`held`), and nodes the pod could never use (wrong model, too few or too small cards), are not
considered.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from gpupool.domain.requests import Request
from gpupool.placement.snapshot import BoolArray, ClusterSnapshot, Decision
from gpupool.placement.whatif import UsableNodes, fits_without
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import NoReclaim
from gpupool.quota.reclaim_sites import SitePlan, plan_site_reclaim


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
    usable: BoolArray | None = None,
) -> SitePlan[int] | NoReclaim:
    """Victims whose eviction lets `req` (of `tenant`) fit on one node, via `plan_site_reclaim`.

    `usable`: the nodes `req` could ever use (see `UsableNodes`); computed when not given."""
    if usable is None:
        usable = UsableNodes()(snap, req)

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
