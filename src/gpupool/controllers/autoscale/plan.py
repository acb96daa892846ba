"""The autoscaler's plan for one workload, pure: the core's rule (`placement.autoscale.decide`)
over its pods' GPU utilisation, cut to the room the cards have, and what to write for it: the
replicas through the scale subresource, the record on the object (the step's time, so a
restarted controller keeps the cooldown; the problem reported, so a report is made once), and
an event with the numbers that caused the step.

The reconciler asks `wanted` first, then, for a step up, cuts it to what the tenant's quota
could ever admit (`within_quota`: replicas × the pod's amount within the quota's nominal and
what it may borrow, and its maxPods), then asks how many more replicas the cards can host
(`placement.whatif.room_for`), and hands that to `plan_workload`. So neither the planner's work
nor the replicas written grow with a number the workload's owner chose beyond what its quota
holds (the readers bound every setting at `bounds.MAX_REPLICAS` before that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import CATALOGUE
from gpupool.domain.requests import Request
from gpupool.placement.autoscale import Direction, LastStep, Step, decide, within_room
from gpupool.quota.resource import demand_of
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import format_time
from gpupool.state.workload import AutoscaleRecord, ScalableWorkload

REASON_UP = "AutoscaledUp"
REASON_DOWN = "AutoscaledDown"
REASON_INVALID = "AutoscaleInvalid"
REASON_NO_ROOM = "AutoscaleNoRoom"


@dataclass(frozen=True, slots=True)
class Event:
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    workload: ScalableWorkload
    step: Step | None  # None: its annotations are bad input
    scale_to: int | None = None  # write spec.replicas (scale subresource)
    record: AutoscaleRecord | None = None  # write gpupool.io/autoscale-status (None: unchanged)
    event: Event | None = None


def average(figures: Sequence[float]) -> float | None:
    return sum(figures) / len(figures) if figures else None


def wanted(w: ScalableWorkload, figures: Sequence[float], now: float) -> Step | None:
    """The core's step for `w` from its pods' figures (percent); None when its policy is bad."""
    if w.policy is None:
        return None
    return decide(w.policy, w.replicas, average(figures), now, w.record.last)


# The largest card gpupool knows: a replica's smallest share of a `gpu` quota (a memory request
# counted against the largest card), so the quota's ceiling is never below what it could admit.
_LARGEST_CARD = max(m.memory_bytes for m in CATALOGUE if m.memory_bytes is not None)


@dataclass(frozen=True, slots=True)
class QuotaCeiling:
    replicas: int  # the most replicas the tenant's quota could ever admit
    why: str  # the numbers, for the event


def quota_ceiling(
    tenant: str, request: Request, quotas: Sequence[TenantQuota]
) -> QuotaCeiling | None:
    """The most replicas asking `request` each that `tenant`'s quota could admit if the tenant
    held nothing else: its nominal plus what it may borrow (its borrowLimit, else what the rest
    of its cohort lends), and at most its maxPods. None: no quota known (a tenant without one is
    unlimited or admits nothing; the cluster maximum bounds it), or the request's amount cannot
    be counted in the quota's resource."""
    quota = next((q for q in quotas if q.name == tenant), None)
    if quota is None:
        return None
    try:
        amount = demand_of(request, quota.resource, _LARGEST_CARD)
    except GpupoolError:
        return None
    if quota.cohort is None:
        borrow = 0
    elif quota.borrow_limit is not None:
        borrow = quota.borrow_limit
    else:
        borrow = sum(q.lendable for q in quotas if q.cohort == quota.cohort and q is not quota)
    fmt = quota.resource.format
    most = quota.nominal + borrow
    held = f"nominal {fmt(quota.nominal)}" + (f" + {fmt(borrow)} it may borrow" if borrow else "")
    replicas = most // amount if amount > 0 else None
    why = f"tenant {tenant}'s quota ({held}) admits at most {replicas} of {fmt(amount)} each"
    if quota.max_pods is not None and (replicas is None or quota.max_pods < replicas):
        replicas = quota.max_pods
        why = f"tenant {tenant}'s quota admits at most {replicas} pods (maxPods)"
    return None if replicas is None else QuotaCeiling(replicas, why)


def within_quota(step: Step, replicas: int, ceiling: QuotaCeiling | None) -> Step:
    """A step up cut to the replicas the tenant's quota could admit (more would only queue at
    the quota gate); at or above that already, it holds, saying why."""
    if ceiling is None or step.direction is not Direction.UP or step.replicas <= ceiling.replicas:
        return step
    if ceiling.replicas <= replicas:
        return Step(
            Direction.HOLD,
            replicas,
            f"{step.reason}: wants {step.replicas} replicas but {ceiling.why}",
            unhostable=step.replicas,
        )
    return Step(
        Direction.UP,
        ceiling.replicas,
        f"{step.reason}: wants {step.replicas} replicas, {ceiling.why}",
    )


def _unfinished(w: ScalableWorkload, now: float) -> int | None:
    """A step recorded but not applied (the controller stopped between the record and the
    scale): its target, while still inside its cooldown, nobody changed the replicas, and the
    target is within the policy's bounds (the record sits on the owner's object: a target it
    wrote beyond them is not taken)."""
    last, policy = w.record.last, w.policy
    if last is None or policy is None or now >= last.at + policy.cooldown_s:
        return None
    if not policy.min_replicas <= last.to_replicas <= policy.max_replicas:
        return None
    if w.replicas == last.from_replicas and last.to_replicas != last.from_replicas:
        return last.to_replicas
    return None


def plan_workload(
    w: ScalableWorkload, step: Step | None, figures: Sequence[float], now: float, room: int
) -> WorkloadPlan:
    """`room`: how many more replicas the cards can host (asked only for a step up)."""
    record = w.record
    if step is None:
        problem = f"{w.problem}; nothing is scaled until it is fixed"
        if record.reported == problem:
            return WorkloadPlan(w, None)
        return WorkloadPlan(
            w,
            None,
            record=AutoscaleRecord(record.last, problem),
            event=Event(REASON_INVALID, problem, warning=True),
        )
    pending = _unfinished(w, now)
    if pending is not None:
        return WorkloadPlan(
            w,
            step,
            scale_to=pending,
            event=Event(
                REASON_UP if pending > w.replicas else REASON_DOWN,
                f"scaled {w.replicas} → {pending}: finishing the step recorded at "
                f"{format_time(record.last.at if record.last else now)}",
            ),
        )
    step = within_room(step, w.replicas, room)
    if step.changes:
        avg = average(figures)
        seen = f"{len(figures)} pod{'s' if len(figures) != 1 else ''} reporting"
        numbers = f"{seen}, average {avg:.1f}%" if avg is not None else "no figures"
        return WorkloadPlan(
            w,
            step,
            scale_to=step.replicas,
            record=AutoscaleRecord(LastStep(now, w.replicas, step.replicas), None),
            event=Event(
                REASON_UP if step.direction is Direction.UP else REASON_DOWN,
                f"scaled {w.replicas} → {step.replicas}: {step.reason} ({numbers})",
            ),
        )
    if step.unhostable is not None:
        key = f"no room for {step.unhostable} replicas"
        if record.reported == key:
            return WorkloadPlan(w, step)
        return WorkloadPlan(
            w,
            step,
            record=AutoscaleRecord(record.last, key),
            event=Event(REASON_NO_ROOM, f"not scaled: {step.reason}", warning=True),
        )
    if record.reported is not None:  # whatever was reported has gone: a new one is told again
        return WorkloadPlan(w, step, record=AutoscaleRecord(record.last, None))
    return WorkloadPlan(w, step)
