"""Notice -> grace -> evict, or withdraw: the plan noun four controllers share, pure.

Reclaim (of quota and of room), lease expiry, budget drain and defragmentation evict a running
pod the same way: the pod first gets a notice (an annotation carrying `state.notice.ReclaimNotice`:
when it was given, when the pod is evicted, for whom; each user its own annotation) and an Event;
the deadline lives on the pod, so a restarted controller carries on. Once the grace period is
over the pod is evicted through the Eviction API (`notices.write`); a notice that is no longer
wanted before then is withdrawn. What differs between the users is *why*: who gets a notice,
and when a standing notice is no longer wanted. That stays in each user's plan; the values and
the steps they all take are here:
- `NoticePod`, `EvictPod`, `WithdrawNotice`: what a round writes for one pod;
- `new_notice`: a notice given now with a grace period;
- `settle`: a standing notice this round (withdrawn, evicted once its grace is over, or kept);
- `blocked_notice`: the notice once an eviction was refused (a PodDisruptionBudget).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpupool.rfc3339 import format_time
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView


@dataclass(frozen=True, slots=True)
class NoticePod:
    """Give `pod` the notice (annotation + Event, whose message this is)."""

    pod: PodView
    notice: ReclaimNotice
    message: str


@dataclass(frozen=True, slots=True)
class EvictPod:
    """Evict `pod`: its notice's grace period is over."""

    pod: PodView
    notice: ReclaimNotice
    message: str
    claimant_uid: str = ""  # for room: the uid of the pod room is made for (the hold's `forUid`)
    hold_until: float | None = None  # for room: the hold's end, if the eviction goes through


@dataclass(frozen=True, slots=True)
class WithdrawNotice:
    """Remove `pod`'s notice: what it was given for no longer needs the pod gone."""

    pod: PodView
    message: str


def new_notice(
    now: float, grace_s: float, claimant: str, claimant_pod: str, room: str | None = None
) -> ReclaimNotice:
    """A notice given now, the pod to be evicted once `grace_s` has passed."""
    return ReclaimNotice(now, now + grace_s, claimant, claimant_pod, room=room)


def grace_over(notice: ReclaimNotice, now: float) -> bool:
    return notice.evict_at <= now


def deadline(evict_at: float, grace_s: float) -> str:
    """When a notice's pod will be evicted, as its Event says it."""
    return f"{format_time(evict_at)} (grace period {grace_s:g}s)"


def given_and_over(notice: ReclaimNotice) -> str:
    """An eviction's Event: when the notice was given and when its grace period ended."""
    return (
        f"notice given at {format_time(notice.at)}, grace period over at "
        f"{format_time(notice.evict_at)}"
    )


def settle(
    pod: PodView,
    notice: ReclaimNotice,
    now: float,
    *,
    withdraw: str | None,
    evicted: str,
    claimant_uid: str = "",
    hold_until: float | None = None,
) -> EvictPod | WithdrawNotice | None:
    """A standing notice this round: withdrawn when `withdraw` says why (whatever its deadline);
    else the pod evicted (`evicted`: the Event's message) once the grace period is over, unless
    it is already being deleted; else None (it waits). `claimant_uid`/`hold_until`: the room
    hold the eviction records, if any."""
    if withdraw is not None:
        return WithdrawNotice(pod, withdraw)
    if not grace_over(notice, now) or pod.deleting:
        return None
    return EvictPod(pod, notice, evicted, claimant_uid, hold_until)


def blocked_notice(notice: ReclaimNotice, refused: str) -> ReclaimNotice | None:
    """The notice recording that the Eviction API refused (`refused`: why), to be written on the
    pod; None when the notice says so already (a refusal is recorded once, retried each round)."""
    if notice.blocked == refused:
        return None
    return replace(notice, blocked=refused)
