"""What the defragmentation planner is given: the slices on the cards, and the rules it obeys.

A controller builds these from its state (leases, their pods' owners and PodDisruptionBudgets);
the simulator from its running jobs. Both hand the planner the same typed values.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError
from gpupool.placement.snapshot import Decision


class InvalidDefragThreshold(GpupoolError):
    """A defragmentation threshold is not a percentage from 0 to 100."""


class InvalidDefragMoveLimit(GpupoolError):
    """A bound on moves per round is not a positive whole number."""


@dataclass(frozen=True, slots=True)
class Resident:
    """A slice placed on the snapshot, with what decides whether it may be moved.

    `decision` is where it sits (it must be assumed on the snapshot the planner gets);
    `disruption_budget` names the PodDisruptionBudget covering its pod, if any (the planner is
    told how many disruptions each budget allows now); `has_owner`: a controller (ReplicaSet,
    StatefulSet, Job ...) recreates the pod when it is evicted, so a move is an eviction followed
    by a recreation elsewhere."""

    id: str
    decision: Decision
    priority: int = 0
    exclusive: bool = False
    has_owner: bool = True
    disruption_budget: str | None = None


@dataclass(frozen=True, slots=True)
class DefragRules:
    """`threshold_pct`: a card whose fragmentation is above this (0-100) is a source to clear;
    `max_moves`: at most this many moves in one round (None: no bound); `move_orphans`: also move
    pods that no owner will recreate (off by default: their eviction would end them)."""

    threshold_pct: float
    max_moves: int | None = None
    move_orphans: bool = False

    def __post_init__(self) -> None:
        t = self.threshold_pct
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= 100:
            raise InvalidDefragThreshold(
                f"the defragmentation threshold is a percentage of a card's memory from 0 to 100; "
                f"got {t!r}"
            )
        m = self.max_moves
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise InvalidDefragMoveLimit(
                f"the bound on moves per round must be a whole number of 1 or more "
                f"(leave it out for no bound); got {m!r}"
            )

    @property
    def threshold(self) -> float:
        """The threshold as a fraction of a card (0..1)."""
        return float(self.threshold_pct) / 100.0
