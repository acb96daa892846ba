"""The autoscaler's plan for one workload, pure: the core's rule (`placement.autoscale.decide`)
over its pods' GPU utilisation, cut to the room the cards have, and what to write for it: the
replicas through the scale subresource, the record on the object (the step's time, so a
restarted controller keeps the cooldown; the problem reported, so a report is made once), and
an event with the numbers that caused the step.

The reconciler asks `wanted` first, then, for a step up, how many more replicas the cards can
host (`placement.whatif.room_for`), and hands that to `plan_workload`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.placement.autoscale import Direction, LastStep, Step, decide, within_room
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


def _unfinished(w: ScalableWorkload, now: float) -> int | None:
    """A step recorded but not applied (the controller stopped between the record and the
    scale): its target, while still inside its cooldown and nobody changed the replicas."""
    last, policy = w.record.last, w.policy
    if last is None or policy is None or now >= last.at + policy.cooldown_s:
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
