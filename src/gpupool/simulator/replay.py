"""`replay`: a trace over time, with tenants, quotas, borrowing and reclaim.

Arrivals come from the trace's creation times (compressed, see `replay_jobs`), departures after
each pod's run time; a pod waits in its tenant's admission queue until the quota core admits it
and the planner finds it a place, and waiting pods are retried whenever capacity or quota frees.
Three runs side by side, same pods, same tenants, same placement policy:

- `whole-card`: every GPU pod takes whole cards (a 0.46-GPU pod holds a card), quotas without
  borrowing: stock Kubernetes with per-namespace quotas;
- `pooled`: pods take the share they ask for, quotas without borrowing;
- `pooled-borrowing`: pooled, and tenants borrow their cohort's unused quota; a tenant within
  its nominal quota reclaims it (notice, grace period, eviction; an evicted pod restarts).

Reclaim starts in two cases. A tenant within nominal whose quota borrowers hold (admission's
`RECLAIM_NEEDED`) gets its quota back; a tenant within nominal whose pod the quota admits but no
node has room for, while cohort members run on borrowed quota, gets *room*: victims on one node
whose eviction lets the pod fit there (`replay_reclaim`). A quota reclaim for a pod that does not
fit now either (the first one its tenant has in flight) also chooses its victims for room, falling
back to quota alone when no node can be cleared. The room is held for the claimant until the victims
are evicted: its node is cordoned for everyone else, and the claimant is placed first at eviction
time; if the claimant is placed elsewhere first, the notices are withdrawn.

`gpu_allocation_pct_mean` counts the GPU capacity the running pods asked for (in `whole-card` the
rest of each card they hold is stranded and shows in `gpu_held_pct_mean`), time-averaged over the
arrival window (first to last arrival), as a percentage of the cluster's GPUs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupool.domain.devices import Node
from gpupool.domain.requests import MILLI, Request
from gpupool.placement import ClusterSnapshot, Decision, Planner, TargetWorkload
from gpupool.placement.defrag import DefragPlan, DefragRules, Move, plan_defrag
from gpupool.placement.fragmentation import (
    CommonSizes,
    in_use_fragmentation,
    pool_fragmentation,
)
from gpupool.placement.whatif import place_together
from gpupool.quota.admission import Admit, Reject, Wait, WaitReason, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.gang import GangAdmit, decide_gang
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter
from gpupool.quota.queue import AdmissionQueue, FifoMode, QueueEntry
from gpupool.quota.reclaim import Notice, ReclaimPlan, plan_reclaim
from gpupool.quota.reclaim_sites import SitePlan
from gpupool.simulator.replay_defrag import FRAG_SAMPLES, RECENT, ReplayDefrag, movable
from gpupool.simulator.replay_jobs import Job
from gpupool.simulator.replay_leases import ask_of, gang_entry, lease_for, most_milli
from gpupool.simulator.replay_placement import Shape, fits_node, place, shape_of
from gpupool.simulator.replay_reclaim import UsableNodes, room_plan
from gpupool.simulator.replay_room import RoomHolds
from gpupool.simulator.replay_stats import RunStats
from gpupool.simulator.tenancy import Tenancy

MODES = ("whole-card", "pooled", "pooled-borrowing")
_DEPART, _EVICT, _WAKE, _ARRIVE, _DEFRAG = 0, 1, 2, 3, 4
GANG = "gang:"  # the queue entry of a complete gang: `gang:<name>`


@dataclass(slots=True)
class _Running:
    lease: Lease
    decision: Decision
    job: Job


@dataclass(slots=True)
class Engine:
    """One run of one mode. Build with `Engine.create`, then `run()`."""

    mode: str
    jobs: dict[str, Job]
    tenancy: Tenancy
    snap: ClusterSnapshot
    planner: Planner
    ledger: Ledger
    meter: Meter
    queue: AdmissionQueue
    horizon: tuple[float, float]
    stats: RunStats
    metered: bool  # budgets or idle lending: admission asks the meter
    events: list[tuple[float, int, int, str]] = field(default_factory=list)
    running: dict[str, _Running] = field(default_factory=dict)
    notices: dict[str, Notice] = field(default_factory=dict)
    failed_shapes: set[Shape] = field(default_factory=set)
    seq: int = 0
    now: float = 0.0
    requested_milli: int = 0
    wakes: set[float] = field(default_factory=set)
    claims: dict[str, int] = field(default_factory=dict)  # tenant -> quota a reclaim frees for it
    room: RoomHolds = field(default_factory=RoomHolds)  # reclaim for room: its holds
    on_node: dict[int, set[str]] = field(default_factory=dict)  # node -> running lease ids
    usable: UsableNodes = field(default_factory=UsableNodes)
    defrag: ReplayDefrag | None = None
    recent: deque[Request] = field(default_factory=lambda: deque(maxlen=RECENT))
    frag_next: float = 0.0  # the next fragmentation sample's time
    # gang -> its members waiting (arrived, or evicted with it); queued as one entry when complete
    gangs: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        mode: str,
        nodes: Sequence[Node],
        jobs: Sequence[Job],
        tenancy: Tenancy,
        policy: str,
        workload: TargetWorkload,
        seed: int = 0,
        defrag: ReplayDefrag | None = None,
    ) -> Engine:
        if mode not in MODES:
            raise ValueError(f"unknown replay mode {mode!r}; one of {', '.join(MODES)}")
        if mode != "pooled-borrowing":
            tenancy = tenancy.without_borrowing()
        snap = ClusterSnapshot.from_nodes(nodes)
        book = QuotaBook(tenancy.quotas)
        arrivals = [j.arrival for j in jobs] or [0.0]
        engine = cls(
            mode=mode,
            jobs={j.id: j for j in jobs},
            tenancy=tenancy,
            snap=snap,
            planner=Planner(policy, workload, seed),
            ledger=Ledger(book),
            meter=Meter(book),
            queue=AdmissionQueue(tenancy.fifo, {q.name: q.priority for q in book}),
            horizon=(min(arrivals), max(arrivals)),
            stats=RunStats(
                mode if defrag is None else f"{mode}+defrag",
                [q.name for q in book],
                snap.total_gpu_milli(),
            ),
            metered=any(q.budget is not None or q.lend_after_idle_s > 0 for q in book),
            defrag=defrag,
        )
        engine.frag_next = engine.horizon[0]
        for job in jobs:
            engine._push(job.arrival, _ARRIVE, job.id)
        if defrag is not None:
            for at in defrag.round_times(*engine.horizon):
                engine._push(at, _DEFRAG, "")
        return engine

    # -- event plumbing ------------------------------------------------------------------------
    def _push(self, at: float, kind: int, key: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, kind, self.seq, key))

    def _advance(self, to: float) -> None:
        lo, hi = self.horizon
        step = max(hi - lo, 1e-9) / FRAG_SAMPLES
        while self.frag_next < to and self.frag_next <= hi:
            # the state is the same from the last event until `to`
            sizes = CommonSizes.learn(self.recent)
            self.stats.sample_fragmentation(
                self.frag_next,
                pool_fragmentation(self.snap, sizes),
                in_use_fragmentation(self.snap, sizes),
            )
            self.frag_next += step
        start, end = max(self.now, lo), min(to, hi)
        if end > start:
            borrowed = sum(self.ledger.borrowed(q.name) for q in self.ledger.book)
            held = self.snap.allocated_gpu_milli()
            self.stats.integrate(end - start, self.requested_milli, held, borrowed)
            self.stats.sample(start, self.requested_milli, held)
        if to > self.now:
            self.now = to

    def run(self, until: float | None = None) -> RunStats:
        """Play the events; with `until`, stop before the first event at or after it (the
        state then is the cluster at that time, for `gpupool defrag plan`)."""
        while self.events and (until is None or self.events[0][0] < until):
            at = self.events[0][0]
            self._advance(at)
            freed: set[int] = set()
            wake = False
            arrived: list[str] = []
            defrag = False
            while self.events and self.events[0][0] == at:
                _, kind, _, key = heapq.heappop(self.events)
                if kind == _DEFRAG:
                    defrag = True
                elif kind == _DEPART:
                    self._depart(key, freed)
                elif kind == _EVICT:
                    self._evict(key, freed)
                elif kind == _WAKE:
                    self.wakes.discard(at)
                    wake = True
                else:
                    arrived.append(key)
            for key in arrived:
                job = self.jobs[key]
                self.recent.append(job.request)
                self._enqueue(job)
            if defrag:
                self._defrag_round(freed)
            if freed and self.room.no_room:
                self._reopen_room(freed)
            served = self._serve_holds()
            if freed or wake or served:
                if wake:
                    self.failed_shapes.clear()
                else:
                    self.failed_shapes = {
                        shape
                        for shape in self.failed_shapes
                        if not any(fits_node(self.snap, i, shape) for i in freed)
                    }
                self._drain(None)
            elif arrived:
                self._drain(set(arrived))
            if self.claims:
                waiting = set(self.queue.tenants())
                self.claims = {t: n for t, n in self.claims.items() if t in waiting}
        if until is not None:
            self._advance(until)
            return self.stats
        for key in list(self.queue_ids()):
            self.stats.never_admitted(self.jobs[key].tenant)
        return self.stats

    def queue_ids(self) -> list[str]:
        return [
            member
            for t in self.queue.tenants()
            for e in self.queue.entries(t)
            for member in (self.gangs[e.id[len(GANG) :]] if e.id.startswith(GANG) else [e.id])
        ]

    def _enqueue(self, job: Job) -> None:
        """Queue an arrived (or evicted) job; a gang's member waits for the rest of its gang,
        which is queued as one entry once all its members are there (as the live queue does)."""
        if job.gang is None:
            self.queue.push(
                QueueEntry(job.id, job.tenant, job.request.priority, job.arrival, job.share_milli)
            )
            return
        members = self.gangs.setdefault(job.gang, [])
        members.append(job.id)
        if len(members) == job.gang_size:
            self.queue.push(gang_entry(GANG + job.gang, [self.jobs[m] for m in members]))

    # -- admission -----------------------------------------------------------------------------
    def _amount(self, job: Job) -> int:
        """What the job is admitted for: the most it may hold (its lease is charged what it
        holds once placed, `lease_for`)."""
        return most_milli(self.snap, job.request)

    def _drain(self, only: set[str] | None) -> None:
        strict = self.queue.mode is FifoMode.STRICT
        for tenant in self.queue.tenants():
            floor: int | None = None
            for entry in list(self.queue.entries(tenant)):
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
                    outcome = self._attempt_gang(entry.id[len(GANG) :])
                else:
                    job = self.jobs[entry.id]
                    amount = self._amount(job)
                    if floor is not None and amount >= floor:
                        if strict:
                            break
                        continue
                    outcome = self._attempt(job, amount)
                if outcome is None:
                    continue
                if outcome is WaitReason.NO_FIT:
                    if strict:
                        break
                    continue
                floor = amount if floor is None else min(floor, amount)
                if strict:
                    break

    def _attempt(self, job: Job, amount: int) -> WaitReason | None:
        """Try to admit and place one queued job; None when it left the queue."""
        failed = shape_of(job.request) in self.failed_shapes
        if failed and not self._may_want_room(job, amount):
            self.queue.mark(job.id, WaitReason.NO_FIT, "no card has room (unchanged since tried)")
            return WaitReason.NO_FIT
        ask = ask_of(job, amount)
        verdict = decide(self.ledger, ask, self.now, self.meter if self.metered else None)
        if isinstance(verdict, Reject):
            self._reject(job)
            return None
        if isinstance(verdict, Wait):
            return self._wait(job.id, job, verdict)
        if verdict.borrowed and self._held_for_claimants(job.tenant, amount):
            self.queue.mark(job.id, WaitReason.COHORT_EXHAUSTED, "capacity held for a reclaim")
            return WaitReason.COHORT_EXHAUSTED
        if failed:
            if not verdict.borrowed:
                self._reclaim_room(job, 0)
            self.queue.mark(job.id, WaitReason.NO_FIT, "no card has room (unchanged since tried)")
            return WaitReason.NO_FIT
        outcome = self._place(job, verdict)
        if outcome is WaitReason.NO_FIT and not verdict.borrowed:
            self._reclaim_room(job, 0)
        return outcome

    def _attempt_gang(self, gang: str) -> WaitReason | None:
        """Admit and place a complete gang, all its members at once, or none; None when it
        left the queue. Placement is asked first (a what-if: the snapshot is left as it was),
        then the quota core's gang decision, whose leases are the members' own."""
        entry_id = GANG + gang
        jobs = [self.jobs[m] for m in self.gangs[gang]]
        placed = place_together(self.planner, self.snap, [j.request for j in jobs])
        if isinstance(placed, int):
            self.queue.mark(
                entry_id,
                WaitReason.NO_FIT,
                f"gang {gang!r}: member {jobs[placed].id} fits on no card once the others are "
                f"placed",
            )
            return WaitReason.NO_FIT
        asks = [ask_of(j, self._amount(j)) for j in jobs]

        made: dict[int, Lease] = {}  # member -> its lease (in the ledger once all admit)

        def lease_of(i: int, verdict: Admit) -> Lease:
            made[i] = self._lease_of(
                jobs[i], placed[i], verdict.amount, verdict.borrowed, verdict.preemptible, gang
            )
            return made[i]

        meter = self.meter if self.metered else None
        verdict = decide_gang(self.ledger, gang, asks, self.now, lease_of, meter)
        if isinstance(verdict, Reject):
            self.queue.remove(entry_id)
            del self.gangs[gang]
            for job in jobs:
                self.stats.rejected(job.tenant)
            return None
        if isinstance(verdict, Wait):
            return self._wait(entry_id, jobs[0], verdict)
        assert isinstance(verdict, GangAdmit)
        self.queue.remove(entry_id)
        del self.gangs[gang]
        for i, (job, plan, admit) in enumerate(zip(jobs, placed, verdict.admits, strict=True)):
            self._run(job, plan, made[i])  # each decision was planned with the ones before it
            self._admitted(job, admit.borrowed)
        return None

    def _wait(self, entry_id: str, job: Job, verdict: Wait) -> WaitReason:
        """Mark the queue entry waiting; reclaim for `job`'s tenant, or wake when it asks."""
        self.queue.mark(entry_id, verdict.reason, verdict.detail)
        if verdict.reason is WaitReason.RECLAIM_NEEDED:
            self._reclaim(job, verdict.reclaim_needed)
        if verdict.retry_at is not None and verdict.retry_at not in self.wakes:
            self.wakes.add(verdict.retry_at)
            self._push(verdict.retry_at, _WAKE, "")
        return verdict.reason

    def _admitted(self, job: Job, borrowed: bool) -> None:
        self.requested_milli += job.share_milli
        self.stats.admitted(job.tenant, self.now - job.arrival, first=job.id not in self.stats.seen)
        self.stats.seen.add(job.id)
        if borrowed:
            self.stats.borrowed_admissions += 1

    def _reject(self, job: Job) -> None:
        self.queue.remove(job.id)
        self.stats.rejected(job.tenant)
        if job.id in self.room:
            self._drop_hold(job.id, withdraw=True)

    def _held_for_claimants(self, tenant: str, amount: int) -> bool:
        """Whether borrowing `amount` would take capacity a reclaim is freeing for another
        tenant (without this, evicted borrowers would borrow it straight back)."""
        cohort = self.ledger.book[tenant].cohort
        held = sum(
            need
            for claimant, need in self.claims.items()
            if claimant != tenant and self.ledger.book[claimant].cohort == cohort
        )
        return held > 0 and self.ledger.pool_free(cohort or "") - amount < held

    def _place(self, job: Job, verdict: Admit) -> WaitReason | None:
        req = job.request
        plan = place(self.planner, self.snap, req)
        if not isinstance(plan, Decision):
            if plan:
                self._reject(job)
                return None
            self.failed_shapes.add(shape_of(req))
            self.queue.mark(job.id, WaitReason.NO_FIT, "no card has room")
            return WaitReason.NO_FIT
        self.queue.remove(job.id)
        self._start(job, plan, verdict.amount, verdict.borrowed, verdict.preemptible)
        if job.tenant in self.claims:
            left = self.claims[job.tenant] - verdict.amount
            if left > 0:
                self.claims[job.tenant] = left
            else:
                del self.claims[job.tenant]
        if job.id in self.room:
            self._drop_hold(job.id, withdraw=True)
        if verdict.borrowed:
            self.room.no_room.clear()  # a new borrowed lease: room reclaims may find victims
        self._admitted(job, verdict.borrowed)
        return None

    def _start(
        self, job: Job, plan: Decision, amount: int, borrowed: bool, preemptible: bool
    ) -> None:
        """Run `job` at `plan` under a new lease from now; it departs after its run time."""
        lease = self._lease_of(job, plan, amount, borrowed, preemptible, job.gang)
        self.ledger.add(lease)
        self._run(job, plan, lease)

    def _run(self, job: Job, plan: Decision, lease: Lease) -> None:
        """`job` runs at `plan` under `lease` (in the ledger already) until its run time ends."""
        self.snap.assume(plan)
        self.running[lease.id] = _Running(lease, plan, job)
        self.on_node.setdefault(plan.node_index, set()).add(lease.id)
        self._push(self.now + job.duration, _DEPART, lease.id)

    def _lease_of(
        self,
        job: Job,
        plan: Decision,
        amount: int,
        borrowed: bool,
        preemptible: bool,
        gang: str | None,
    ) -> Lease:
        """The lease `job` would hold at `plan` from now (assumed on the snapshot or not)."""
        self.seq += 1
        return lease_for(
            job, plan, self.snap, f"{job.id}@{self.seq}", self.now, amount, borrowed,
            preemptible, gang,
        )  # fmt: skip

    # -- leaving -------------------------------------------------------------------------------
    def _end(self, key: str, how: str, freed: set[int]) -> _Running | None:
        run = self.running.get(key)
        if run is None:
            return None
        live = self.ledger.lease(key) or run.lease
        if how == "reclaim":
            if not live.reclaimable:
                return None
            ended = live.reclaim(self.now)
        else:
            ended = live.release(self.now)
        del self.running[key]
        self.on_node[run.decision.node_index].discard(key)
        self.ledger.remove(key)
        self.snap.forget(run.decision)
        freed.add(run.decision.node_index)
        self.requested_milli -= run.job.share_milli
        self.meter.close(ended)
        self.stats.metered(ended, borrowed=run.lease.borrowed)
        return run

    # -- defragmentation ----------------------------------------------------------------------
    def _defrag_round(self, freed: set[int]) -> None:
        """Plan a round over the snapshot and carry its moves out now (see `replay_defrag`)."""
        assert self.defrag is not None
        plan = self.plan_defrag(self.defrag.rules)
        self.stats.defrag_rounds += 1
        for move in plan.moves:
            self._move(move, freed)

    def plan_defrag(self, rules: DefragRules) -> DefragPlan:
        """The planner's moves over the state now (the snapshot is left as it is)."""
        residents = movable(
            (
                (key, run.decision, run.job.request.priority, run.job.request.exclusive)
                for key, run in self.running.items()
            ),
            self.notices.keys(),
            self.room.nodes(),
        )
        return plan_defrag(self.snap, residents, CommonSizes.learn(self.recent), rules)

    def _move(self, move: Move, freed: set[int]) -> None:
        """The moved pod leaves and re-enters at once at its new place: its lease ends, a new
        one starts there with the same quota standing, and its run time starts over."""
        key = move.resident
        run = self.running[key]
        live = self.ledger.lease(key) or run.lease
        self._end(key, "release", freed)
        self.requested_milli += run.job.share_milli  # still asked for: it re-enters at once
        started = live.active_at if live.active_at is not None else live.reserved_at
        self.stats.moved(run.job.share_milli * max(0.0, self.now - started))
        self._start(run.job, move.target, live.amount, live.borrowed, live.preemptible)

    def _depart(self, key: str, freed: set[int]) -> None:
        self.notices.pop(key, None)
        self._end(key, "release", freed)

    def _evict(self, key: str, freed: set[int]) -> None:
        if self.notices.pop(key, None) is None:
            return
        run = self._end(key, "reclaim", freed)
        if run is None:
            return
        self.stats.reclaims += 1
        if self.room.evicted(key):
            self.stats.room_reclaims += 1
        self._enqueue(run.job)  # a gang's members come back together (reclaim takes all)
        # the evicted pod restarts from scratch: its whole run time is ahead of it again

    def _reclaim(self, job: Job, needed: int) -> None:
        """Quota back for `job`'s tenant: with room for the pod too when it does not fit now."""
        tenant = job.tenant
        if job.id in self.room:
            return
        if (
            tenant not in self.claims
            and (
                shape_of(job.request) in self.failed_shapes
                or not isinstance(place(self.planner, self.snap, job.request), Decision)
            )
            and self._reclaim_room(job, needed)
        ):
            self.claims[tenant] = needed
            return
        plan = plan_reclaim(self.ledger, tenant, needed, self.now, pending=self.notices.keys())
        if not isinstance(plan, ReclaimPlan):
            return
        self.claims[tenant] = max(self.claims.get(tenant, 0), needed)
        self._notify(plan.notices)

    def _notify(self, notices: Sequence[Notice]) -> None:
        for notice in notices:
            self.notices[notice.lease_id] = notice
            self._push(notice.evict_at, _EVICT, notice.lease_id)

    # -- reclaim for room ----------------------------------------------------------------------
    def _borrowers_beside(self, tenant: str) -> bool:
        book = self.ledger.book
        return any(
            self.ledger.borrowed(m.name) > 0
            for m in book.cohort(book[tenant].cohort)
            if m.name != tenant
        )

    def _may_want_room(self, job: Job, amount: int) -> bool:
        """Cheap test: might a room reclaim be planned for this job (within nominal, borrowers
        beside it, none planned for it or found impossible for its shape)?"""
        return (
            self.mode == "pooled-borrowing"
            and job.id not in self.room
            and shape_of(job.request) not in self.room.no_room
            and self.ledger.used(job.tenant) + amount <= self.ledger.book[job.tenant].nominal
            and self._borrowers_beside(job.tenant)
        )

    def _decision_of(self, lease_id: str) -> Decision | None:
        run = self.running.get(lease_id)
        return None if run is None else run.decision

    def _reclaim_room(self, job: Job, needed: int) -> bool:
        """Notice borrowed leases on one node so that `job` fits there; hold that node for it."""
        shape = shape_of(job.request)
        if not self._may_want_room(job, 0):
            return False
        plan = room_plan(
            self.snap,
            self.ledger,
            self._decision_of,
            self.room.nodes(),
            job.request,
            job.tenant,
            self.now,
            needed,
            pending=self.notices.keys(),
            usable=self.usable(self.snap, job.request),
        )
        if not isinstance(plan, SitePlan) or not plan.plan.notices:
            if needed == 0:
                self.room.no_room[shape] = job.request
            return False
        notices = plan.plan.notices
        self.room.hold(self.snap, job.id, plan.site, (n.lease_id for n in notices))
        self._notify(notices)
        return True

    def _reopen_room(self, freed: set[int]) -> None:
        """Forget "no room" for shapes that room freed on these nodes might now serve."""
        for node in freed:
            gone = [
                self.running[key].decision
                for key in self.on_node.get(node, ())
                if (self.ledger.lease(key) or self.running[key].lease).reclaimable
            ]
            self.room.reopen(self.snap, node, gone)

    def _drop_hold(self, job_id: str, withdraw: bool) -> None:
        """End a hold: reopen its node; `withdraw` the notices not yet carried out."""
        node = self.room.drop(self.snap, job_id, self.notices if withdraw else None)
        self.failed_shapes = {
            shape for shape in self.failed_shapes if not fits_node(self.snap, node, shape)
        }

    def _serve_holds(self) -> bool:
        """Place first the pods whose victims are all gone, on the room freed for them."""
        ready = self.room.ready(self.notices.keys())
        for job_id in ready:
            self._drop_hold(job_id, withdraw=False)
            if job_id in self.queue:
                job = self.jobs[job_id]
                self.failed_shapes.discard(shape_of(job.request))
                self._attempt(job, self._amount(job))
        return bool(ready)


def requested_total(jobs: Sequence[Job]) -> int:
    return sum(j.share_milli for j in jobs) // MILLI
