"""The one writer of notices (`notices.plan`): the notice annotation and its Event, the eviction
through the Eviction API, the eviction's mark on the pod's GpuLease, the withdrawal.

Each user says what is its own in a `NoticeKind`: its annotation (`gpupool.io/reclaim-notice`,
`expiry-notice`, `drain-notice`, `defrag-notice`: the same JSON, `adapters.wire.reclaim_notice`),
its Event reasons, what an eviction is for, and what the evicted pod's GpuLease records
(`status.reclaim`). A refusal of the Eviction API (429: a PodDisruptionBudget) is retried every
round and recorded once in the notice's `blocked`, with an `EvictionBlocked` event. Every
annotation of a pod is written only to the same pod (`annotate_pod(..., same_uid=True)`: the
adapter's patch tests its uid), so a pod replaced under the same name is left alone. A `NoticeTally`
hears what was done (the controller's outcome metrics, the defragmentation metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.wire.reclaim_notice import notice_annotation
from gpupool.controllers.contain import Containment, pod_ref, run_one
from gpupool.controllers.notices.plan import (
    EvictPod,
    NoticePod,
    WithdrawNotice,
    blocked_notice,
)
from gpupool.ports import ClusterApi, Outcomes
from gpupool.rfc3339 import format_time
from gpupool.state.lease_writes import EvictionMark
from gpupool.state.listed import ObjectReference
from gpupool.state.notice import ReclaimNotice
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.notices")


@dataclass(frozen=True, slots=True)
class NoticeKind:
    """What is one user's own in the notices it writes."""

    step: str  # the containment's step name (ReconcileFailed events, backoff): reclaim, drain...
    annotation: str  # the pod annotation carrying the notice
    noticed: str  # the Event reason of a notice
    evicted: str  # the Event reason of an eviction
    purpose: Callable[[EvictPod], str]  # what an eviction is for (the EvictionBlocked event)
    withdrawn: str = ""  # the Event reason of a withdrawal ("": this kind never withdraws)
    # The evicted pod's GpuLease `status.reclaim` (at the round's time), or None to leave the
    # lease as it is.
    lease_record: Callable[[EvictPod, float], EvictionMark | None] | None = None
    unmarked: str = (
        "its lease will end as for any pod that goes"  # a record that could not be written
    )


class NoticeTally(Protocol):
    """Hears what the writer did, once each write went through."""

    def noticed(self, item: NoticePod) -> None: ...

    def evicted(self, item: EvictPod) -> None: ...

    def blocked(self, item: EvictPod) -> None:
        """The Eviction API refused a pod's eviction for the first time."""
        ...

    def withdrawn(self, item: WithdrawNotice) -> None: ...


@dataclass(frozen=True, slots=True)
class OutcomeTally:
    """Notices and evictions to the controller's outcome metrics (`ports.Outcomes`), by the
    reason `reason` names for the notice (QuotaReclaim, RoomReclaim, LeaseExpired...)."""

    outcomes: Outcomes
    reason: Callable[[ReclaimNotice], str]

    def noticed(self, item: NoticePod) -> None:
        self.outcomes.noticed(self.reason(item.notice))

    def evicted(self, item: EvictPod) -> None:
        self.outcomes.evicted(self.reason(item.notice))

    def blocked(self, item: EvictPod) -> None:
        pass

    def withdrawn(self, item: WithdrawNotice) -> None:
        pass


def outcome_tally(
    outcomes: Outcomes | None, reason: Callable[[ReclaimNotice], str]
) -> OutcomeTally | None:
    return None if outcomes is None else OutcomeTally(outcomes, reason)


async def write_notices(
    api: ClusterApi,
    kind: NoticeKind,
    refs: Mapping[str, ObjectReference],
    now: float,
    *,
    notices: Iterable[NoticePod] = (),
    evictions: Iterable[EvictPod] = (),
    withdrawals: Iterable[WithdrawNotice] = (),
    tally: NoticeTally | None = None,
    contain: Containment | None = None,
) -> None:
    """Write one round's notices, then its evictions, then its withdrawals. `refs`: the pods'
    references by namespace/name, as listed (an event names the pod; one not there is named
    from its view); `contain`: one pod's failed write fails only that pod (without one, it
    raises)."""
    stamp = format_time(now)
    for item in notices:
        pod = refs.get(item.pod.key) or pod_ref(item.pod)
        await run_one(contain, kind.step, pod,
                      partial(give_notice, api, kind, pod, item, stamp, tally), now)  # fmt: skip
    for eviction in evictions:
        pod = refs.get(eviction.pod.key) or pod_ref(eviction.pod)
        await run_one(contain, kind.step, pod,
                      partial(evict, api, kind, pod, eviction, now, tally), now)  # fmt: skip
    for withdrawal in withdrawals:
        pod = refs.get(withdrawal.pod.key) or pod_ref(withdrawal.pod)
        await run_one(contain, kind.step, pod,
                      partial(withdraw, api, kind, pod, withdrawal, stamp, tally), now)  # fmt: skip


async def give_notice(
    api: ClusterApi,
    kind: NoticeKind,
    pod: ObjectReference,
    item: NoticePod,
    stamp: str,
    tally: NoticeTally | None = None,
) -> bool:
    """The notice annotation and a Warning event; False when the pod is gone (or replaced)."""
    view = item.pod
    notice = {kind.annotation: notice_annotation(item.notice)}
    if not await api.annotate_pod(view, notice, same_uid=True):
        return False
    log.warning("%s on %s: %s", kind.annotation, view.key, item.message)
    await api.event(pod, kind.noticed, item.message, warning=True, now_rfc3339=stamp)
    if tally is not None:
        tally.noticed(item)
    return True


async def evict(
    api: ClusterApi,
    kind: NoticeKind,
    pod: ObjectReference,
    eviction: EvictPod,
    now: float,
    tally: NoticeTally | None = None,
) -> bool:
    """Evict a pod whose grace period is over: True when the Eviction API took it (then its
    GpuLease gets the kind's record and the pod an event); a refusal is written into the notice
    once (`blocked`) with an `EvictionBlocked` event and retried next round."""
    view, notice = eviction.pod, eviction.notice
    stamp = format_time(now)
    refused = await api.evict_pod(view.namespace, view.name)
    if refused is not None:
        log.info("eviction of %s refused, retrying: %s", view.key, refused)
        if tally is not None and notice.blocked is None:
            tally.blocked(eviction)
        await _record_refusal(api, kind, pod, eviction, refused, stamp)
        return False
    log.warning("evicted %s: %s", view.key, eviction.message)
    if kind.lease_record is not None:
        record = kind.lease_record(eviction, now)
        if record is not None:
            await _mark_lease(api, view, record, f"{kind.unmarked}, once {view.key} is gone")
    await api.event(pod, kind.evicted, eviction.message, warning=True, now_rfc3339=stamp)
    if tally is not None:
        tally.evicted(eviction)
    return True


async def _record_refusal(
    api: ClusterApi,
    kind: NoticeKind,
    pod: ObjectReference,
    eviction: EvictPod,
    refused: str,
    stamp: str,
) -> None:
    view = eviction.pod
    blocked = blocked_notice(eviction.notice, refused)
    if blocked is None:
        return  # said so already; the notice carries it
    notice = {kind.annotation: notice_annotation(blocked)}
    if await api.annotate_pod(view, notice, same_uid=True):
        await api.event(
            pod,
            "EvictionBlocked",
            f"{kind.purpose(eviction)}: the Eviction API refused ({refused}); a "
            f"PodDisruptionBudget protects this pod now, retrying later",
            warning=True,
            now_rfc3339=stamp,
        )


async def _mark_lease(api: ClusterApi, pod: PodView, record: EvictionMark, lost: str) -> None:
    """The evicted pod's GpuLease (named after the pod's uid, in its namespace) gets
    `status.reclaim`, so it ends for this reason once the pod is gone; it keeps holding its
    slices until then. Best effort: the eviction is done, and without the mark the lease is
    released, metered the same, as for any pod that goes (`lost`: what the log says is lost)."""
    if not pod.uid:
        log.warning("evicted %s has no uid: %s", pod.key, lost)
        return
    try:
        recorded = await api.mark_lease_evicted(pod.namespace, pod.uid, record)
    except NotLeader:
        raise
    except Exception as err:
        log.warning("could not mark GpuLease %s/%s as evicted (%s): %s", pod.namespace, pod.uid,
                    err, lost)  # fmt: skip
        return
    if not recorded:
        log.warning("no GpuLease %s/%s to mark as evicted: %s", pod.namespace, pod.uid, lost)


async def withdraw(
    api: ClusterApi,
    kind: NoticeKind,
    pod: ObjectReference,
    withdrawal: WithdrawNotice,
    stamp: str,
    tally: NoticeTally | None = None,
) -> bool:
    """Remove the notice annotation, with an event; False when the pod is gone (or replaced)."""
    view = withdrawal.pod
    if not await api.annotate_pod(view, {kind.annotation: None}, same_uid=True):
        return False
    log.info("%s on %s withdrawn", kind.annotation, view.key)
    await api.event(pod, kind.withdrawn, withdrawal.message, now_rfc3339=stamp)
    if tally is not None:
        tally.withdrawn(withdrawal)
    return True
