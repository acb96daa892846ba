"""The autoscaler's rule, pure: from a workload's replicas, its pods' average GPU utilisation, the
time and its last step, how many replicas it should have.

Above `up_pct` it scales up in proportion to the utilisation (towards the middle of the band,
`target_pct`, so that the next reading lands inside it rather than at the other edge), at most
×2 per step; below `down_pct` it scales down the same way, never below `min_replicas` (≥ 1);
inside `cooldown_s` of the last step it does nothing. The live controller
(`controllers/autoscale`) and a simulator replay call the same function with their own clocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from gpupool.domain.errors import GpupoolError

UP_PCT = 80.0
DOWN_PCT = 30.0
COOLDOWN_S = 300.0
MAX_STEP_FACTOR = 2  # a step up at most doubles the replicas


class InvalidAutoscaleThreshold(GpupoolError):
    """A scale-up or scale-down threshold is not a percentage from 0 to 100, or down ≥ up."""


class InvalidAutoscaleBounds(GpupoolError):
    """Replica bounds are not whole numbers with 1 ≤ min ≤ max."""


class InvalidAutoscaleSetting(GpupoolError):
    """An autoscale setting does not parse (not a number, a duration, true/false)."""


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    max_replicas: int
    min_replicas: int = 1
    up_pct: float = UP_PCT
    down_pct: float = DOWN_PCT
    cooldown_s: float = COOLDOWN_S

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise InvalidAutoscaleBounds(
                f"replicas must satisfy 1 <= min <= max; got min {self.min_replicas}, "
                f"max {self.max_replicas}"
            )
        for name, pct in (("scale-up", self.up_pct), ("scale-down", self.down_pct)):
            if not 0.0 <= pct <= 100.0:
                raise InvalidAutoscaleThreshold(
                    f"the {name} threshold must be a percentage from 0 to 100; got {pct:g}"
                )
        if not self.down_pct < self.up_pct:
            raise InvalidAutoscaleThreshold(
                f"the scale-down threshold ({self.down_pct:g}%) must be below the scale-up "
                f"threshold ({self.up_pct:g}%)"
            )
        if not self.cooldown_s >= 0:
            raise InvalidAutoscaleSetting(
                f"the cooldown must not be negative; got {self.cooldown_s:g}s"
            )

    @property
    def target_pct(self) -> float:
        """Where a step aims the average: the middle of the band."""
        return (self.up_pct + self.down_pct) / 2


@dataclass(frozen=True, slots=True)
class LastStep:
    """The last step taken (recorded on the workload, so a restarted controller keeps the
    cooldown)."""

    at: float
    from_replicas: int
    to_replicas: int


class Direction(Enum):
    UP = "up"
    DOWN = "down"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Step:
    direction: Direction
    replicas: int  # what it should have (the current count when holding)
    reason: str
    unhostable: int | None = None  # held because no card can host this many replicas

    @property
    def changes(self) -> bool:
        return self.direction is not Direction.HOLD


def _hold(replicas: int, reason: str) -> Step:
    return Step(Direction.HOLD, replicas, reason)


def cooling(policy: ScalePolicy, last: LastStep | None, now: float) -> float:
    """Seconds of the cooldown left (0: none)."""
    if last is None:
        return 0.0
    return max(0.0, last.at + policy.cooldown_s - now)


def decide(
    policy: ScalePolicy,
    replicas: int,
    utilisation_pct: float | None,
    now: float,
    last: LastStep | None = None,
) -> Step:
    """The step for a workload with `replicas` whose pods average `utilisation_pct` (None: no
    figures)."""
    if replicas < 1:
        return _hold(replicas, "scaled to zero: the autoscaler does not start a stopped workload")
    left = cooling(policy, last, now)
    if left > 0:
        return _hold(replicas, f"cooling down for {left:.0f}s more after the last step")
    if replicas > policy.max_replicas:
        return Step(
            Direction.DOWN,
            policy.max_replicas,
            f"{replicas} replicas is above the maximum {policy.max_replicas}",
        )
    if replicas < policy.min_replicas:
        return Step(
            Direction.UP,
            policy.min_replicas,  # the owner's floor, at once (the x2 cap is for steps)
            f"{replicas} replicas is below the minimum {policy.min_replicas}",
        )
    if utilisation_pct is None:
        return _hold(replicas, "no GPU utilisation figures for its pods")
    util = f"average GPU utilisation {utilisation_pct:.0f}%"
    wanted = math.ceil(replicas * utilisation_pct / policy.target_pct - 1e-9)
    if utilisation_pct > policy.up_pct:
        if replicas >= policy.max_replicas:
            return _hold(replicas, f"{util} is above {policy.up_pct:g}% but at the maximum")
        to = min(max(wanted, replicas + 1), replicas * MAX_STEP_FACTOR, policy.max_replicas)
        return Step(
            Direction.UP,
            to,
            f"{util} is above {policy.up_pct:g}% (aiming at {policy.target_pct:g}%)",
        )
    if utilisation_pct < policy.down_pct:
        if replicas <= policy.min_replicas:
            return _hold(replicas, f"{util} is below {policy.down_pct:g}% but at the minimum")
        to = max(min(wanted, replicas - 1), policy.min_replicas)
        return Step(
            Direction.DOWN,
            to,
            f"{util} is below {policy.down_pct:g}% (aiming at {policy.target_pct:g}%)",
        )
    return _hold(replicas, f"{util} is within {policy.down_pct:g}-{policy.up_pct:g}%")


def within_room(step: Step, replicas: int, room: int) -> Step:
    """A step up cut to the replicas the cards can host (`room`: how many more fit); a step up
    with no room left holds, saying so."""
    if step.direction is not Direction.UP or step.replicas - replicas <= room:
        return step
    if room <= 0:
        return Step(
            Direction.HOLD,
            replicas,
            f"{step.reason}: wants {step.replicas} replicas but no card can host another one",
            unhostable=step.replicas,
        )
    return Step(
        Direction.UP,
        replicas + room,
        f"{step.reason}: wants {step.replicas} replicas, room for {room} more",
    )
