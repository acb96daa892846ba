"""Reclaim of borrowed quota, the pure decision (DESIGN.md section 6): a tenant within its
nominal quota whose pods wait because borrowers in its cohort hold the pool gets that quota back.

`plan_reclaim_round` (pure) decides over one snapshot of pods, GpuLeases and GpuQuotas:
- who waits for reclaim: the admission queue's decision over the same snapshot (the round's
  `AdmissionPlan`, its `reclaim` asks in queue order), needs summed per cohort;
- victims: the quota core's `plan_reclaim` — only borrowed (or preemptible) leases, from the
  tenant furthest over its nominal quota first, lowest priority, newest first, never below a
  tenant's guaranteed quota; exclusive pods never borrow, so are never taken. A pod's borrowed
  mark is its GpuLease's `spec.borrowed` / `spec.preemptible` (copied at bind from
  `gpupool.io/admitted`), or the annotation itself while the pod has no live lease yet
  (`admission.charge.mark_borrowed`); the admission plan is the round's own (the reclaim round
  consumes it, it does not decide quota a second time);
- notices already given count first, so a victim is noticed once and the next round chooses
  more only for new needs;
- each new victim gets the annotation `gpupool.io/reclaim-notice` (JSON `{at, evictAt, claimant,
  for}`: the deadline is on the pod, so a restarted controller carries on where it stopped) and
  an event; once `evictAt` has passed it is evicted through the Eviction API, so
  PodDisruptionBudgets are honoured (a 429 is retried every round; the annotation's `blocked`
  and a Warning event say why). Once evicted, the pod's GpuLease gets `status.reclaim` (when,
  which kind, for whom): it keeps holding its slices while the pod terminates and ends as
  Reclaimed, not Released, once the pod is gone (`leases.plan`);
- when nobody in the victim's cohort waits for reclaim any more (capacity freed some other way),
  its notice is withdrawn.
Reclaim *for room* (`reclaim.room`): a pod the quota admitted that kube-scheduler marked
Unschedulable, of a tenant within its nominal quota, gets borrowed victims on the one node where
the fewest of them make it fit (the extender's snapshot and the replay's what-if). Their notices
carry `room` (the node) besides `for` (the pod); they follow the same grace period and Eviction
API path, hold that node against other room claims, and are withdrawn once the pod is gone,
placed (anywhere) or finished. Quota and room notices both count as pending for either kind.
Once a victim for room is evicted, its GpuLease's `status.reclaim` also carries the *room hold*
(`room`, `for`, `forUid`, `holdUntil` = the eviction time + `ROOM_HOLD_S`): the extender refuses
that node to every other pod until the waiting pod holds a lease or `holdUntil` passes
(`extender_http.room_hold`), so the freed room is not taken by a pod kube-scheduler tries first.
Each round ends (removes `holdUntil` from) every standing hold whose pod is gone, placed, finished
or gated again; a standing hold of a pod that still waits keeps the node out of other room claims
and the pod from claiming room again.
`reclaim.reconcile.ReclaimReconciler` takes the admission round's reads, calls this plan and
applies it (`reclaim.reconcile.apply_reclaim`); nothing is kept between rounds. The admission
queue then admits the waiting pod once its victims are gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.controllers.admission.plan import AdmissionPlan, ReclaimAsk
from gpupool.controllers.notices.plan import (
    EvictPod,
    NoticePod,
    WithdrawNotice,
    deadline,
    given_and_over,
    settle,
)
from gpupool.controllers.reclaim.room import Placement, plan_room_reclaim
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import NoReclaim, Notice, plan_reclaim
from gpupool.quota.resource import Resource
from gpupool.state.lease import RoomHold
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

# How long, from the eviction, the node a victim for room leaves is held for the pod room was
# made for (`holdUntil`): time for the victim to terminate, its lease to be released and
# kube-scheduler to retry the pod. A hold that outlives its use (the pod is never retried, the
# victim takes longer to stop) ends then at the latest, so no node is blocked for ever.
ROOM_HOLD_S = 300.0


@dataclass(frozen=True, slots=True)
class Stuck:
    """A pod waiting for reclaim that reclaim cannot help (not enough borrowed leases)."""

    pod: PodView
    reason: str


@dataclass(frozen=True, slots=True)
class EndHold:
    """A room hold on a GpuLease (`lease_key`) whose pod no longer waits: remove `holdUntil`."""

    lease_key: str
    hold: RoomHold
    message: str


@dataclass(frozen=True, slots=True)
class ReclaimRound:
    notices: tuple[NoticePod, ...]
    evictions: tuple[EvictPod, ...]
    withdrawals: tuple[WithdrawNotice, ...]
    stuck: tuple[Stuck, ...]
    ended_holds: tuple[EndHold, ...] = ()


def _room_claimant_waits(claimant: PodView | None) -> bool:
    """The pod a room notice is for still waits for that room (exists, unbound, not finished)."""
    return (
        claimant is not None
        and claimant.node is None
        and not claimant.gated
        and not claimant.terminal
        and not claimant.deleting
    )


def _room_gone_why(claimant: PodView | None) -> str:
    if claimant is None:
        return "the pod is gone"
    if claimant.node is not None:
        return f"the pod was placed on node {claimant.node}"
    if claimant.terminal or claimant.deleting:
        return "the pod finished or is being deleted"
    return "the pod waits for quota again"


def plan_reclaim_round(
    admission: AdmissionPlan,
    views: Sequence[PodView],
    now: float,
    *,
    placement: Placement | None = None,
    holds: Mapping[str, RoomHold] | None = None,
) -> ReclaimRound:
    """This round's notices, evictions and withdrawals (pure; see the module docstring).

    `admission`: the round's admission plan over `views` (the same pods, borrowed marks taken
    from their leases: `admission.charge.mark_borrowed`); its ledger counts the pods it admitted
    this round, which hold their quota from now on. `placement`: where capacity is (nodes,
    GpuNodes, GpuLeases; `build_placement`); without it no new reclaim for room is planned
    (notices for room already given are still carried out or withdrawn). `holds`: the room
    holds on GpuLeases (lease key -> hold)."""
    ledger = admission.ledger
    noticed = standing_notices(views, ledger)
    state = RoundState(now, {(p.uid or p.key): p for p in views}, set(noticed))
    needed = plan_quota_notices(admission, state)
    standing = room_standing(noticed, views, holds or {}, now)
    if placement is not None:
        plan_room_notices(views, ledger, placement, standing.held, state)
    by_key = {p.key: p for p in views}
    evictions: list[EvictPod] = []
    withdrawals: list[WithdrawNotice] = []
    for lease_id, (pod, notice) in noticed.items():
        gone = standing.gone.get(lease_id)
        outcome = settle_notice(
            pod, notice, lease_cohort(ledger, lease_id), needed, gone, by_key, now
        )
        if isinstance(outcome, WithdrawNotice):
            withdrawals.append(outcome)
        elif outcome is not None:
            evictions.append(outcome)
    return ReclaimRound(
        tuple(state.notices),
        tuple(evictions),
        tuple(withdrawals),
        tuple(state.stuck),
        standing.ended_holds,
    )


@dataclass(slots=True)
class RoundState:
    """What one reclaim round has chosen so far: the victims' leases under a notice (given in an
    earlier round, or new), the new notices and the pods reclaim cannot help."""

    now: float
    pod_of: Mapping[str, PodView]  # lease id (the pod's uid, else its key) -> the pod
    pending: set[str]
    notices: list[NoticePod] = field(default_factory=list)
    stuck: list[Stuck] = field(default_factory=list)

    def notice(self, victim: PodView, lease_id: str, notice: ReclaimNotice, message: str) -> None:
        self.notices.append(NoticePod(victim, notice, message))
        self.pending.add(lease_id)


@dataclass(frozen=True, slots=True)
class RoomStanding:
    """The room already being made: claimant pod key -> the node held for it; the room notices
    to withdraw (lease id -> why); the room holds on GpuLeases whose pod no longer waits."""

    held: dict[str, str]
    gone: dict[str, str]
    ended_holds: tuple[EndHold, ...]


def standing_notices(
    views: Sequence[PodView], ledger: Ledger
) -> dict[str, tuple[PodView, ReclaimNotice]]:
    """The notices given in earlier rounds, on pods that still hold quota: lease id -> both."""
    noticed: dict[str, tuple[PodView, ReclaimNotice]] = {}
    for pod in views:
        notice = pod.reclaim_notice
        if notice is not None and pod.holds_quota and ledger.lease(pod.uid or pod.key):
            noticed[pod.uid or pod.key] = (pod, notice)
    return noticed


def lease_cohort(ledger: Ledger, lease_id: str) -> str | None:
    """The cohort of the lease's tenant; None when the ledger has no such lease."""
    lease = ledger.lease(lease_id)
    return None if lease is None else ledger.book[lease.tenant].cohort


def plan_quota_notices(admission: AdmissionPlan, state: RoundState) -> dict[str, int]:
    """Notices for the admission plan's reclaim asks, in queue order, the needs summed per
    cohort; the quota each cohort needs back (0: reclaim cannot help its first ask)."""
    ledger, now = admission.ledger, state.now
    needed: dict[str, int] = {}
    for ask in admission.reclaim:
        quota = ledger.book.get(ask.tenant)
        if quota is None or quota.cohort is None:
            continue
        cohort = quota.cohort
        total = needed.get(cohort, 0) + ask.needed
        mine = [i for i in state.pending if lease_cohort(ledger, i) == cohort]
        result = plan_reclaim(ledger, ask.tenant, total, now, mine)
        if isinstance(result, NoReclaim):
            state.stuck.append(Stuck(ask.pod, result.reason))
            needed.setdefault(cohort, 0)
            continue
        needed[cohort] = total
        for chosen in result.notices:
            victim = state.pod_of[chosen.lease_id]
            notice = ReclaimNotice(now, chosen.evict_at, ask.tenant, ask.pod.key)
            message = quota_notice_message(ask, victim, chosen, quota.resource, now)
            state.notice(victim, chosen.lease_id, notice, message)
    return needed


def quota_notice_message(
    ask: ReclaimAsk, victim: PodView, chosen: Notice, resource: Resource, now: float
) -> str:
    """The event on a victim of reclaim for quota."""
    fmt = resource.format
    holding = (
        f"this pod runs on borrowed quota ({fmt(chosen.amount)})"
        if victim.gang is None
        else f"this pod's gang {victim.gang.key} runs on borrowed quota and is reclaimed "
        f"whole ({fmt(chosen.amount)} of it here)"
    )
    return (
        f"tenant {ask.tenant} needs its quota back ({fmt(ask.needed)} for pod "
        f"{ask.pod.key}); {holding} and will be evicted at "
        f"{deadline(chosen.evict_at, chosen.evict_at - now)}"
    )


def room_standing(
    noticed: Mapping[str, tuple[PodView, ReclaimNotice]],
    views: Sequence[PodView],
    holds: Mapping[str, RoomHold],
    now: float,
) -> RoomStanding:
    """Which room notices and holds still serve a waiting pod (`RoomStanding`)."""
    by_key = {p.key: p for p in views}
    held: dict[str, str] = {}
    gone: dict[str, str] = {}
    for lease_id, (_pod, notice) in noticed.items():
        if notice.room is None:
            continue
        claimant = by_key.get(notice.claimant_pod)
        if _room_claimant_waits(claimant):
            held[notice.claimant_pod] = notice.room
        else:
            gone[lease_id] = _room_gone_why(claimant)
    pod_by_uid = {p.uid: p for p in views if p.uid}
    ended: list[EndHold] = []
    for lease_key, hold in sorted(holds.items()):
        if hold.until <= now:
            continue  # over: the extender no longer reads it
        claimant = pod_by_uid.get(hold.uid)
        if _room_claimant_waits(claimant):
            assert claimant is not None
            held.setdefault(claimant.key, hold.node)
        else:
            why = _room_gone_why(claimant)
            ended.append(
                EndHold(lease_key, hold, f"room on node {hold.node} for pod {hold.pod}: {why}")
            )
    return RoomStanding(held, gone, tuple(ended))


def plan_room_notices(
    views: Sequence[PodView],
    ledger: Ledger,
    placement: Placement,
    held: Mapping[str, str],
    state: RoundState,
) -> None:
    """Notices for room (`reclaim.room`) for the pods the quota admitted that fit nowhere."""
    now = state.now
    room = plan_room_reclaim(views, ledger, placement, now, pending=state.pending, held=held)
    for claim in room.claims:
        fmt = ledger.book[claim.pod.tenant].resource.format
        for chosen in claim.notices:
            victim = state.pod_of[chosen.lease_id]
            notice = ReclaimNotice(
                now, chosen.evict_at, claim.pod.tenant, claim.pod.key, room=claim.node
            )
            message = (
                f"reclaim for room on node {claim.node} for pod {claim.pod.key}: tenant "
                f"{claim.pod.tenant} is within its quota but no node has room for the pod; "
                f"this pod runs on borrowed quota ({fmt(chosen.amount)}) on that node and "
                f"will be evicted at {deadline(chosen.evict_at, chosen.evict_at - now)}"
            )
            state.notice(victim, chosen.lease_id, notice, message)
    state.stuck.extend(
        Stuck(n.pod, f"no room for pod {n.pod.key}: {n.reason}") for n in room.no_room
    )


def settle_notice(
    pod: PodView,
    notice: ReclaimNotice,
    victim_cohort: str | None,
    needed: Mapping[str, int],
    room_gone: str | None,
    by_key: Mapping[str, PodView],
    now: float,
) -> EvictPod | WithdrawNotice | None:
    """A standing notice this round: withdrawn when its room is gone (`room_gone`: why) or, for
    quota, when nobody in the victim's cohort (`victim_cohort`) still needs quota back; the pod
    evicted once its grace period is over; else None (it waits)."""
    withdraw: str | None = None
    if notice.room is not None:
        if room_gone is not None:
            withdraw = (
                f"reclaim for room on node {notice.room} for pod {notice.claimant_pod} "
                f"withdrawn: {room_gone}"
            )
    elif victim_cohort is None or victim_cohort not in needed:
        withdraw = (
            f"reclaim for tenant {notice.claimant} withdrawn: nobody in its cohort waits "
            f"for borrowed quota any more"
        )
    claimant = by_key.get(notice.claimant_pod) if notice.room is not None else None
    why = (
        f"to make room on node {notice.room} for pod {notice.claimant_pod} of tenant "
        f"{notice.claimant}"
        if notice.room is not None
        else f"to give tenant {notice.claimant} its quota back"
    )
    return settle(
        pod,
        notice,
        now,
        withdraw=withdraw,
        evicted=f"evicted {why} ({given_and_over(notice)})",
        claimant_uid=claimant.uid if claimant is not None else "",
        hold_until=now + ROOM_HOLD_S if claimant is not None else None,
    )
