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

The engine (`Engine`) holds the run's state and plays its events in time order; each kind of
event has its module: arrivals and wakes (admission and placement) in `replay_admission`,
departures and evictions in `replay_departure`, reclaim of quota and of room in `replay_reclaim`,
defragmentation rounds in `replay_defrag`.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpupool.domain.devices import Node
from gpupool.domain.requests import MILLI, Request
from gpupool.placement import ClusterSnapshot, Decision, Planner, TargetWorkload
from gpupool.placement.defrag import DefragPlan, DefragRules
from gpupool.placement.fragmentation import (
    CommonSizes,
    in_use_fragmentation,
    pool_fragmentation,
)
from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter
from gpupool.quota.queue import AdmissionQueue, QueueEntry
from gpupool.quota.reclaim import Notice
from gpupool.simulator.replay_admission import drain, serve_holds
from gpupool.simulator.replay_defrag import (
    FRAG_SAMPLES,
    RECENT,
    ReplayDefrag,
    defrag_round,
    plan_round,
)
from gpupool.simulator.replay_departure import depart, evict
from gpupool.simulator.replay_jobs import Job
from gpupool.simulator.replay_leases import GANG, gang_entry, lease_for
from gpupool.simulator.replay_placement import Shape, fits_node
from gpupool.simulator.replay_reclaim import UsableNodes, reopen_room
from gpupool.simulator.replay_room import RoomHolds
from gpupool.simulator.replay_stats import RunStats
from gpupool.simulator.tenancy import Tenancy

MODES = ("whole-card", "pooled", "pooled-borrowing")
_DEPART, _EVICT, _WAKE, _ARRIVE, _DEFRAG = 0, 1, 2, 3, 4


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
            engine.push(job.arrival, _ARRIVE, job.id)
        if defrag is not None:
            for at in defrag.round_times(*engine.horizon):
                engine.push(at, _DEFRAG, "")
        return engine

    # -- event plumbing ------------------------------------------------------------------------
    def push(self, at: float, kind: int, key: str) -> None:
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
                    depart(self, key, freed)
                elif kind == _EVICT:
                    evict(self, key, freed)
                elif kind == _WAKE:
                    self.wakes.discard(at)
                    wake = True
                else:
                    arrived.append(key)
            for key in arrived:
                job = self.jobs[key]
                self.recent.append(job.request)
                self.enqueue(job)
            if defrag:
                defrag_round(self, freed)
            if freed and self.room.no_room:
                reopen_room(self, freed)
            served = serve_holds(self)
            if freed or wake or served:
                if wake:
                    self.failed_shapes.clear()
                else:
                    self.failed_shapes = {
                        shape
                        for shape in self.failed_shapes
                        if not any(fits_node(self.snap, i, shape) for i in freed)
                    }
                drain(self, None)
            elif arrived:
                drain(self, set(arrived))
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

    def enqueue(self, job: Job) -> None:
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

    # -- what the event kinds' steps share -------------------------------------------------------
    def wake_at(self, at: float) -> None:
        """Retry the queue at `at` (once, however many entries ask for it)."""
        if at not in self.wakes:
            self.wakes.add(at)
            self.push(at, _WAKE, "")

    def give_notices(self, notices: Sequence[Notice]) -> None:
        """Note each notice; its lease is evicted at its time (`replay_departure.evict`)."""
        for notice in notices:
            self.notices[notice.lease_id] = notice
            self.push(notice.evict_at, _EVICT, notice.lease_id)

    def start(
        self, job: Job, plan: Decision, amount: int, borrowed: bool, preemptible: bool
    ) -> None:
        """Run `job` at `plan` under a new lease from now; it departs after its run time."""
        lease = self.lease_of(job, plan, amount, borrowed, preemptible, job.gang)
        self.ledger.add(lease)
        self.occupy(job, plan, lease)

    def occupy(self, job: Job, plan: Decision, lease: Lease) -> None:
        """`job` runs at `plan` under `lease` (in the ledger already) until its run time ends."""
        self.snap.assume(plan)
        self.running[lease.id] = _Running(lease, plan, job)
        self.on_node.setdefault(plan.node_index, set()).add(lease.id)
        self.push(self.now + job.duration, _DEPART, lease.id)

    def lease_of(
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

    def end(self, key: str, how: Literal["release", "reclaim"], freed: set[int]) -> _Running | None:
        """End lease `key` (`release`; `reclaim` only while it is reclaimable), free its place
        and note its node in `freed`; meter it. What ran under it, or None if it did not end."""
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

    def decision_of(self, lease_id: str) -> Decision | None:
        """Where the pod under `lease_id` runs; None when it no longer does."""
        run = self.running.get(lease_id)
        return None if run is None else run.decision

    def plan_defrag(self, rules: DefragRules) -> DefragPlan:
        """The planner's moves over the state now (the snapshot is left as it is)."""
        return plan_round(self, rules)


def requested_total(jobs: Sequence[Job]) -> int:
    return sum(j.share_milli for j in jobs) // MILLI
