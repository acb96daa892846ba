"""Arrivals and wakes in the replay: the admission queue drained in order, each entry (a job, or
a complete gang) admitted by the quota core and placed by the planner, or left waiting with its
reason; a tenant within its nominal quota that finds no room starts a reclaim for room
(`replay_reclaim`), and a pod whose room is freed is placed first (`serve_holds`).

Each step takes the replay's `Engine` (`replay.Engine`) and works on its state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.placement import Decision
from gpupool.placement.whatif import place_together
from gpupool.quota.admission import Admit, Reject, Wait, WaitReason, decide
from gpupool.quota.gang import GangAdmit, decide_gang
from gpupool.quota.lease import Lease
from gpupool.quota.queue import FifoMode
from gpupool.simulator.replay_jobs import Job
from gpupool.simulator.replay_leases import GANG, ask_of, most_milli
from gpupool.simulator.replay_placement import place, shape_of
from gpupool.simulator.replay_reclaim import drop_hold, may_want_room, reclaim, reclaim_room

if TYPE_CHECKING:
    from gpupool.simulator.replay import Engine

NO_ROOM_SINCE_TRIED = "no card has room (unchanged since tried)"


def amount_of(engine: Engine, job: Job) -> int:
    """What the job is admitted for: the most it may hold (its lease is charged what it holds
    once placed, `lease_for`)."""
    return most_milli(engine.snap, job.request)


def drain(engine: Engine, only: set[str] | None) -> None:
    """Try the queue's entries in order (`only` these ids, when given); in strict FIFO a tenant's
    queue stops at its first entry that stays; otherwise an entry is skipped when one no larger
    already waits."""
    strict = engine.queue.mode is FifoMode.STRICT
    for tenant in engine.queue.tenants():
        floor: int | None = None
        for entry in list(engine.queue.entries(tenant)):
            if only is not None and entry.id not in only:
                if strict:
                    break
                continue
            if entry.id.startswith(GANG):
                amount = entry.amount
                if floor is not None and amount >= floor:
                    if strict:
                        break
                    continue
                outcome = attempt_gang(engine, entry.id[len(GANG) :])
            else:
                job = engine.jobs[entry.id]
                amount = amount_of(engine, job)
                if floor is not None and amount >= floor:
                    if strict:
                        break
                    continue
                outcome = attempt(engine, job, amount)
            if outcome is None:
                continue
            if outcome is WaitReason.NO_FIT:
                if strict:
                    break
                continue
            floor = amount if floor is None else min(floor, amount)
            if strict:
                break


def attempt(engine: Engine, job: Job, amount: int) -> WaitReason | None:
    """Try to admit and place one queued job; None when it left the queue."""
    failed = shape_of(job.request) in engine.failed_shapes
    if failed and not may_want_room(engine, job, amount):
        engine.queue.mark(job.id, WaitReason.NO_FIT, NO_ROOM_SINCE_TRIED)
        return WaitReason.NO_FIT
    ask = ask_of(job, amount)
    verdict = decide(engine.ledger, ask, engine.now, engine.meter if engine.metered else None)
    if isinstance(verdict, Reject):
        reject(engine, job)
        return None
    if isinstance(verdict, Wait):
        return wait(engine, job.id, job, verdict)
    if verdict.borrowed and held_for_claimants(engine, job.tenant, amount):
        engine.queue.mark(job.id, WaitReason.COHORT_EXHAUSTED, "capacity held for a reclaim")
        return WaitReason.COHORT_EXHAUSTED
    if failed:
        if not verdict.borrowed:
            reclaim_room(engine, job, 0)
        engine.queue.mark(job.id, WaitReason.NO_FIT, NO_ROOM_SINCE_TRIED)
        return WaitReason.NO_FIT
    outcome = place_admitted(engine, job, verdict)
    if outcome is WaitReason.NO_FIT and not verdict.borrowed:
        reclaim_room(engine, job, 0)
    return outcome


def attempt_gang(engine: Engine, gang: str) -> WaitReason | None:
    """Admit and place a complete gang, all its members at once, or none; None when it left the
    queue. Placement is asked first (a what-if: the snapshot is left as it was), then the quota
    core's gang decision, whose leases are the members' own."""
    entry_id = GANG + gang
    jobs = [engine.jobs[m] for m in engine.gangs[gang]]
    placed = place_together(engine.planner, engine.snap, [j.request for j in jobs])
    if isinstance(placed, int):
        engine.queue.mark(
            entry_id,
            WaitReason.NO_FIT,
            f"gang {gang!r}: member {jobs[placed].id} fits on no card once the others are placed",
        )
        return WaitReason.NO_FIT
    asks = [ask_of(j, amount_of(engine, j)) for j in jobs]

    made: dict[int, Lease] = {}  # member -> its lease (in the ledger once all admit)

    def lease_of(i: int, verdict: Admit) -> Lease:
        made[i] = engine.lease_of(
            jobs[i], placed[i], verdict.amount, verdict.borrowed, verdict.preemptible, gang
        )
        return made[i]

    meter = engine.meter if engine.metered else None
    verdict = decide_gang(engine.ledger, gang, asks, engine.now, lease_of, meter)
    if isinstance(verdict, Reject):
        engine.queue.remove(entry_id)
        del engine.gangs[gang]
        for job in jobs:
            engine.stats.rejected(job.tenant)
        return None
    if isinstance(verdict, Wait):
        return wait(engine, entry_id, jobs[0], verdict)
    assert isinstance(verdict, GangAdmit)
    engine.queue.remove(entry_id)
    del engine.gangs[gang]
    for i, (job, plan, admit) in enumerate(zip(jobs, placed, verdict.admits, strict=True)):
        engine.occupy(job, plan, made[i])  # each decision was planned with the ones before it
        admitted(engine, job, admit.borrowed)
    return None


def wait(engine: Engine, entry_id: str, job: Job, verdict: Wait) -> WaitReason:
    """Mark the queue entry waiting; reclaim for `job`'s tenant, or wake when it asks."""
    engine.queue.mark(entry_id, verdict.reason, verdict.detail)
    if verdict.reason is WaitReason.RECLAIM_NEEDED:
        reclaim(engine, job, verdict.reclaim_needed)
    if verdict.retry_at is not None:
        engine.wake_at(verdict.retry_at)
    return verdict.reason


def admitted(engine: Engine, job: Job, borrowed: bool) -> None:
    """Count `job`'s admission: what it asks, how long it waited, whether it borrowed."""
    stats = engine.stats
    engine.requested_milli += job.share_milli
    stats.admitted(job.tenant, engine.now - job.arrival, first=job.id not in stats.seen)
    stats.seen.add(job.id)
    if borrowed:
        stats.borrowed_admissions += 1


def reject(engine: Engine, job: Job) -> None:
    """`job` can never be admitted: it leaves the queue (and the room held for it)."""
    engine.queue.remove(job.id)
    engine.stats.rejected(job.tenant)
    if job.id in engine.room:
        drop_hold(engine, job.id, withdraw=True)


def held_for_claimants(engine: Engine, tenant: str, amount: int) -> bool:
    """Whether borrowing `amount` would take capacity a reclaim is freeing for another tenant
    (without this, evicted borrowers would borrow it straight back)."""
    book = engine.ledger.book
    cohort = book[tenant].cohort
    held = sum(
        need
        for claimant, need in engine.claims.items()
        if claimant != tenant and book[claimant].cohort == cohort
    )
    return held > 0 and engine.ledger.pool_free(cohort or "") - amount < held


def place_admitted(engine: Engine, job: Job, verdict: Admit) -> WaitReason | None:
    """Place a job the quota admits; None when it left the queue (placed, or never fits)."""
    req = job.request
    plan = place(engine.planner, engine.snap, req)
    if not isinstance(plan, Decision):
        if plan:
            reject(engine, job)
            return None
        engine.failed_shapes.add(shape_of(req))
        engine.queue.mark(job.id, WaitReason.NO_FIT, "no card has room")
        return WaitReason.NO_FIT
    engine.queue.remove(job.id)
    engine.start(job, plan, verdict.amount, verdict.borrowed, verdict.preemptible)
    claims = engine.claims
    if job.tenant in claims:
        left = claims[job.tenant] - verdict.amount
        if left > 0:
            claims[job.tenant] = left
        else:
            del claims[job.tenant]
    if job.id in engine.room:
        drop_hold(engine, job.id, withdraw=True)
    if verdict.borrowed:
        engine.room.no_room.clear()  # a new borrowed lease: room reclaims may find victims
    admitted(engine, job, verdict.borrowed)
    return None


def serve_holds(engine: Engine) -> bool:
    """Place first the pods whose victims are all gone, on the room freed for them."""
    ready = engine.room.ready(engine.notices.keys())
    for job_id in ready:
        drop_hold(engine, job_id, withdraw=False)
        if job_id in engine.queue:
            job = engine.jobs[job_id]
            engine.failed_shapes.discard(shape_of(job.request))
            attempt(engine, job, amount_of(engine, job))
    return bool(ready)
