"""What the replay hands the quota core for a job (pure): its ask, the queue entry of a complete
gang (as the live queue keeps one), and the lease a placed job holds.

The replay counts quota in milli-GPU. As in the live system, a job is admitted for the most it
may take (`most_milli`: a byte slice against the smallest card that takes it) and its lease is
charged what its slices hold on the cards it got (`held_milli`), never more than it was admitted
for: a holding above that is a broken invariant (ChargeMismatch), not a figure."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import MILLI, Request
from gpupool.placement.filters import model_mask
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.quota.admission import Ask
from gpupool.quota.lease import Lease
from gpupool.quota.queue import QueueEntry
from gpupool.quota.resource import Resource, demand_of, slice_amount
from gpupool.simulator.replay_jobs import Job

GANG = "gang:"  # the queue entry of a complete gang: `gang:<name>`


class ChargeMismatch(GpupoolError):
    """A placement holds more than its job was admitted for: placement and quota disagree."""


def most_milli(snap: ClusterSnapshot, req: Request) -> int:
    """The most milli-GPU `req` may hold: shares and whole cards are their own measure; a byte
    slice counts against the smallest card of an accepted model that takes it (else the
    smallest such card: the filters then refuse it anyway)."""
    if req.gpu_memory_bytes is None:
        return req.gpu_request_milli
    cards = model_mask(snap, req) & snap.mem_known
    sizes = snap.gmem_total[cards]
    if not len(sizes):
        return req.gpu_request_milli
    takes = sizes[sizes >= req.gpu_memory_bytes]
    return demand_of(req, Resource.GPU, int((takes if len(takes) else sizes).min()))


def held_milli(snap: ClusterSnapshot, plan: Decision) -> int:
    """What `plan`'s slices hold in milli-GPU: each against its card (cards of unknown memory
    carry 1000 units, so a share of them is exact too)."""
    i = plan.node_index
    total = 0
    for card, size in zip(plan.cards, plan.mem_bytes, strict=True):
        amount = slice_amount(size, int(snap.gmem_total[i, card]), Resource.GPU)
        total += MILLI if amount is None else amount
    return total


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
    """The Active lease `job` holds at `plan` from `now`, charged what its slices hold (at most
    `amount`, what it was admitted for; ChargeMismatch otherwise); its GPU bytes count only on
    cards whose memory is known."""
    req = job.request
    held = held_milli(snap, plan)
    if held > amount:
        raise ChargeMismatch(
            f"job {job.id} holds {held}m on {plan.node} but was admitted for {amount}m"
        )
    known = sum(
        size
        for card, size in zip(plan.cards, plan.mem_bytes, strict=True)
        if snap.mem_known[plan.node_index, card]
    )
    return (
        Lease(
            id=lease_id,
            tenant=job.tenant,
            amount=held,
            reserved_at=now,
            priority=req.priority,
            compute_milli=req.compute_milli * req.gpu_count,
            gpu_memory_bytes=known,
            gpu_milli=held,
            borrowed=borrowed,
            preemptible=preemptible,
            exclusive=req.exclusive,
            gang=gang,
        )
        .bind(now)
        .activate(now)
    )
