"""Reclaim in the replay: quota back for a tenant within its nominal quota (notices on cohort
members' borrowed leases, `quota.reclaim.plan_reclaim`), and room for its pod that fits nowhere
(notices on one node's borrowed leases, whose node is then held for the pod: `replay_room`).

The what-if behind room (`room_bound`, `fits_without`, `UsableNodes`) lives in
`placement.whatif` and `room_plan` in `state.room_reclaim`, so the live reclaim controller asks
exactly the same questions; this module keeps the replay's names for them. `HELD` is the node
condition the replay sets on a node whose room is held for a claimant. The notices' evictions are
played as departures (`replay_departure.evict`).

Each step takes the replay's `Engine` (`replay.Engine`) and works on its state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.placement.snapshot import Decision
from gpupool.placement.whatif import UsableNodes, fits_without, room_bound
from gpupool.quota.reclaim import ReclaimPlan, plan_reclaim
from gpupool.quota.reclaim_sites import SitePlan
from gpupool.simulator.replay_jobs import Job
from gpupool.simulator.replay_placement import fits_node, place, shape_of
from gpupool.state.room_reclaim import room_plan

if TYPE_CHECKING:
    from gpupool.simulator.replay import Engine

__all__ = [
    "HELD",
    "UsableNodes",
    "drop_hold",
    "fits_without",
    "may_want_room",
    "reclaim",
    "reclaim_room",
    "reopen_room",
    "room_bound",
    "room_plan",
]

HELD = "held for a reclaim"


def reclaim(engine: Engine, job: Job, needed: int) -> None:
    """Quota back for `job`'s tenant: with room for the pod too when it does not fit now."""
    tenant = job.tenant
    if job.id in engine.room:
        return
    if (
        tenant not in engine.claims
        and (
            shape_of(job.request) in engine.failed_shapes
            or not isinstance(place(engine.planner, engine.snap, job.request), Decision)
        )
        and reclaim_room(engine, job, needed)
    ):
        engine.claims[tenant] = needed
        return
    plan = plan_reclaim(engine.ledger, tenant, needed, engine.now, pending=engine.notices.keys())
    if not isinstance(plan, ReclaimPlan):
        return
    engine.claims[tenant] = max(engine.claims.get(tenant, 0), needed)
    engine.give_notices(plan.notices)


def borrowers_beside(engine: Engine, tenant: str) -> bool:
    """Whether another member of `tenant`'s cohort runs on borrowed quota."""
    ledger = engine.ledger
    book = ledger.book
    return any(
        ledger.borrowed(m.name) > 0 for m in book.cohort(book[tenant].cohort) if m.name != tenant
    )


def may_want_room(engine: Engine, job: Job, amount: int) -> bool:
    """Cheap test: might a room reclaim be planned for this job (within nominal, borrowers
    beside it, none planned for it or found impossible for its shape)?"""
    ledger = engine.ledger
    return (
        engine.mode == "pooled-borrowing"
        and job.id not in engine.room
        and shape_of(job.request) not in engine.room.no_room
        and ledger.used(job.tenant) + amount <= ledger.book[job.tenant].nominal
        and borrowers_beside(engine, job.tenant)
    )


def reclaim_room(engine: Engine, job: Job, needed: int) -> bool:
    """Notice borrowed leases on one node so that `job` fits there; hold that node for it."""
    shape = shape_of(job.request)
    if not may_want_room(engine, job, 0):
        return False
    plan = room_plan(
        engine.snap,
        engine.ledger,
        engine.decision_of,
        engine.room.nodes(),
        job.request,
        job.tenant,
        engine.now,
        needed,
        pending=engine.notices.keys(),
        usable=engine.usable(engine.snap, job.request),
    )
    if not isinstance(plan, SitePlan) or not plan.plan.notices:
        if needed == 0:
            engine.room.no_room[shape] = job.request
        return False
    notices = plan.plan.notices
    engine.room.hold(engine.snap, job.id, plan.site, (n.lease_id for n in notices))
    engine.give_notices(notices)
    return True


def reopen_room(engine: Engine, freed: set[int]) -> None:
    """Forget "no room" for shapes that room freed on these nodes might now serve."""
    running = engine.running
    for node in freed:
        gone = [
            running[key].decision
            for key in engine.on_node.get(node, ())
            if (engine.ledger.lease(key) or running[key].lease).reclaimable
        ]
        engine.room.reopen(engine.snap, node, gone)


def drop_hold(engine: Engine, job_id: str, withdraw: bool) -> None:
    """End a hold: reopen its node; `withdraw` the notices not yet carried out."""
    node = engine.room.drop(engine.snap, job_id, engine.notices if withdraw else None)
    engine.failed_shapes = {
        shape for shape in engine.failed_shapes if not fits_node(engine.snap, node, shape)
    }
