"""What the replay hands the quota core for a job (pure): its ask, the queue entry of a complete
gang (as the live queue keeps one), and the lease a placed job holds."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.quota.admission import Ask
from gpupool.quota.lease import Lease
from gpupool.quota.queue import QueueEntry
from gpupool.simulator.replay_jobs import Job


def ask_of(job: Job, amount: int) -> Ask:
    req = job.request
    return Ask(job.tenant, amount, req.compute_milli, req.exclusive, req.priority)


def gang_entry(entry_id: str, members: Sequence[Job]) -> QueueEntry:
    """One queue entry for a complete gang: its highest priority, its first arrival, its sum."""
    return QueueEntry(
        entry_id,
        members[0].tenant,
        max(j.request.priority for j in members),
        min(j.arrival for j in members),
        sum(j.share_milli for j in members),
    )


def lease_for(
    job: Job,
    plan: Decision,
    snap: ClusterSnapshot,
    lease_id: str,
    now: float,
    amount: int,
    borrowed: bool,
    preemptible: bool,
    gang: str | None,
) -> Lease:
    """The Active lease `job` holds at `plan` from `now`; its GPU bytes count only on cards whose
    memory is known."""
    req = job.request
    known = sum(
        size
        for card, size in zip(plan.cards, plan.mem_bytes, strict=True)
        if snap.mem_known[plan.node_index, card]
    )
    return (
        Lease(
            id=lease_id,
            tenant=job.tenant,
            amount=amount,
            reserved_at=now,
            priority=req.priority,
            compute_milli=req.compute_milli * req.gpu_count,
            gpu_memory_bytes=known,
            gpu_milli=amount,
            borrowed=borrowed,
            preemptible=preemptible,
            exclusive=req.exclusive,
            gang=gang,
        )
        .bind(now)
        .activate(now)
    )
