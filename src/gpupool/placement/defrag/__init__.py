"""Defragmentation: which slices to move where so that fragmented cards become usable again."""

from gpupool.placement.defrag.plan import DefragPlan, Move, Skip, SkipReason
from gpupool.placement.defrag.planner import plan_defrag
from gpupool.placement.defrag.rules import (
    DefragRules,
    InvalidDefragMoveLimit,
    InvalidDefragThreshold,
    Resident,
)

__all__ = [
    "DefragPlan",
    "DefragRules",
    "InvalidDefragMoveLimit",
    "InvalidDefragThreshold",
    "Move",
    "Resident",
    "Skip",
    "SkipReason",
    "plan_defrag",
]
