"""Replay of the autoscaler's rule over a demand series: the same `placement.autoscale.decide`
the controller runs, on the simulator's virtual clock.

A service's demand is given in replicas' worth of GPU work (1.0: one replica kept 100% busy).
Every `interval_s` the rule reads the average utilisation of the replicas serving then
(`min(100, 100 × demand ÷ serving)`) and steps; a new replica serves `startup_s` after the step
that made it (a model takes time to load), a removed one stops at once. The replay reports
what the rule costs and what it leaves unserved, beside a fixed deployment at the maximum:
replica-hours, demand-hours beyond the serving capacity, time above the scale-up threshold, the
steps taken.

`diurnal_demand` is the built-in series: two days of a daily cycle with noise and one burst.
"""

from __future__ import annotations

import csv
import itertools
import math
import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError, InputFileError
from gpupool.placement.autoscale import Direction, LastStep, ScalePolicy, decide


class InvalidDemand(GpupoolError):
    """A demand series is empty, not in time order, or negative."""


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float
    demand: float  # replicas' worth of GPU work


@dataclass(frozen=True, slots=True)
class Point:
    t_s: float
    demand: float
    replicas: int  # what the rule has set
    serving: int  # those started and loaded
    utilisation_pct: float


@dataclass(frozen=True, slots=True)
class AutoscaleReplay:
    policy: ScalePolicy
    timeline: tuple[Point, ...]
    steps_up: int
    steps_down: int
    replica_hours: float
    unserved_hours: float  # demand beyond the serving replicas, replica-hours of work
    hours_above_up: float  # time the serving replicas averaged above the up threshold
    fixed_max_replica_hours: float  # a deployment fixed at the maximum, for comparison
    fixed_max_unserved_hours: float

    def summary(self) -> dict[str, float | int]:
        return {
            "steps_up": self.steps_up,
            "steps_down": self.steps_down,
            "replica_hours": round(self.replica_hours, 3),
            "unserved_hours": round(self.unserved_hours, 3),
            "hours_above_up_threshold": round(self.hours_above_up, 3),
            "fixed_max_replica_hours": round(self.fixed_max_replica_hours, 3),
            "fixed_max_unserved_hours": round(self.fixed_max_unserved_hours, 3),
            "max_replicas_used": max((p.replicas for p in self.timeline), default=0),
        }


def _checked(series: Sequence[Sample]) -> Sequence[Sample]:
    if not series:
        raise InvalidDemand("the demand series is empty; give at least one (time, demand) row")
    for before, after in itertools.pairwise(series):
        if after.t_s < before.t_s:
            raise InvalidDemand(
                f"the demand series must be in time order: {after.t_s:g}s comes after "
                f"{before.t_s:g}s"
            )
    for sample in series:
        if not sample.demand >= 0:
            raise InvalidDemand(f"demand at {sample.t_s:g}s is negative ({sample.demand:g})")
    return series


def replay_autoscale(
    policy: ScalePolicy,
    series: Sequence[Sample],
    *,
    replicas: int,
    interval_s: float = 15.0,
    startup_s: float = 60.0,
) -> AutoscaleReplay:
    """Step the rule every `interval_s` from the first sample's time to the last's."""
    series = _checked(series)
    if not interval_s > 0 or not startup_s >= 0:
        raise InvalidDemand("the interval must be positive and the start-up time not negative")
    times = [s.t_s for s in series]
    ready: list[float] = [times[0]] * replicas  # when each replica serves (the first at once)
    last: LastStep | None = None
    timeline: list[Point] = []
    up = down = 0
    replica_h = unserved_h = above_h = fixed_h = fixed_unserved_h = 0.0
    hours = interval_s / 3600.0
    t = times[0]
    while t <= times[-1]:
        demand = series[bisect_right(times, t) - 1].demand
        serving = sum(1 for r in ready if r <= t)
        util = min(100.0, 100.0 * demand / serving) if serving else None
        step = decide(policy, len(ready), util, t, last)
        if step.direction is not Direction.HOLD:
            last = LastStep(t, len(ready), step.replicas)
            if step.replicas > len(ready):
                up += 1
                ready += [t + startup_s] * (step.replicas - len(ready))
            else:
                down += 1
                ready = sorted(ready)[: step.replicas]  # the newest go first
        timeline.append(Point(t, demand, len(ready), serving, util or 0.0))
        replica_h += len(ready) * hours
        unserved_h += max(0.0, demand - serving) * hours
        above_h += hours if util is not None and util > policy.up_pct else 0.0
        fixed_h += policy.max_replicas * hours
        fixed_unserved_h += max(0.0, demand - policy.max_replicas) * hours
        t += interval_s
    return AutoscaleReplay(
        policy, tuple(timeline), up, down, replica_h, unserved_h, above_h, fixed_h,
        fixed_unserved_h,
    )  # fmt: skip


def diurnal_demand(
    *, days: float = 2.0, peak: float = 6.0, trough: float = 0.8, seed: int = 42
) -> tuple[Sample, ...]:
    """A demand sample every minute: a daily cycle from `trough` to `peak` (peak at 14:00),
    ±10% noise, and a one-hour burst to 1.5 × peak on the second afternoon."""
    rng = random.Random(seed)
    out = []
    for minute in range(int(days * 24 * 60) + 1):
        t = minute * 60.0
        hour = (t / 3600.0) % 24
        cycle = trough + (peak - trough) * (1 + math.cos((hour - 14) / 24 * 2 * math.pi)) / 2
        burst = 1.5 * peak if 24 * 3600 + 15 * 3600 <= t < 24 * 3600 + 16 * 3600 else 0.0
        out.append(Sample(t, max(burst, cycle * rng.uniform(0.9, 1.1))))
    return tuple(out)


def load_demand(path: str) -> tuple[Sample, ...]:
    """A CSV with a header `t_s,demand` (seconds, replicas' worth of work), one row a sample."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows or [c.strip() for c in rows[0][:2]] != ["t_s", "demand"]:
        raise InputFileError(path, 1, None, "the header must be t_s,demand")
    out = []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            out.append(Sample(float(row[0]), float(row[1])))
        except (ValueError, IndexError):
            raise InputFileError(path, line, None, f"want two numbers, got {row!r}") from None
    try:
        return tuple(_checked(out))
    except InvalidDemand as err:
        raise InputFileError(path, 1, None, str(err)) from None
