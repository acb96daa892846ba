"""What the defragmentation planner answers: the moves in order, and why other cards stay."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gpupool.placement.snapshot import Decision


class SkipReason(Enum):
    """Why a card over the threshold is left as it is (one reason per card)."""

    EXCLUSIVE = "holds an exclusive pod, which is never moved"
    NO_OWNER = "holds a pod that no owner would recreate (moving orphans is off)"
    DISRUPTION_BUDGET = "a PodDisruptionBudget allows too few disruptions to move its pods"
    MULTI_CARD = "holds a pod spanning several cards"
    MOVE_LIMIT = "clearing it would pass the bound on moves per round"
    NO_TARGET = "no other card can take enough of its slices without passing the threshold"
    STILL_FRAGMENTED = "moving every slice that may move would still leave it over the threshold"
    RECEIVED = "it received moved slices this round"


@dataclass(frozen=True, slots=True)
class Move:
    """Move `resident` from where it is (`source`) to `target` (a placement on the snapshot)."""

    resident: str
    priority: int
    source: Decision
    target: Decision

    @property
    def source_card(self) -> tuple[str, int]:
        return self.source.node, self.source.cards[0]

    @property
    def target_card(self) -> tuple[str, int]:
        return self.target.node, self.target.cards[0]


@dataclass(frozen=True, slots=True)
class Skip:
    node: str
    card: int  # slot on the node
    fragmentation: float  # 0..1
    reason: SkipReason
    resident: str | None = None  # the slice that blocked it, where one did


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """Moves in the order to carry them out (each feasible after the ones before it), the cards
    they clear, and the pool's fragmentation (0..1) before and after the whole plan."""

    moves: tuple[Move, ...]
    cleared: tuple[tuple[str, int], ...]  # (node, slot) of each card the moves fix (emptied or not)
    skipped: tuple[Skip, ...]
    pool_before: float
    pool_after: float
    card_before: dict[tuple[str, int], float]  # every card the plan touches, before and after
    card_after: dict[tuple[str, int], float]

    def __bool__(self) -> bool:
        return bool(self.moves)
