"""Placement over a snapshot: filters with reasons, scoring policies, the planner."""

from gpupool.placement.filters import Feasibility, Reason, explain, feasibility
from gpupool.placement.fragmentation import FragmentationModel
from gpupool.placement.planner import Planner
from gpupool.placement.policies import POLICIES, Policy, make_policy
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.verdict import Unschedulable
from gpupool.placement.workload import Shape, TargetWorkload

__all__ = [
    "POLICIES",
    "ClusterSnapshot",
    "Decision",
    "Feasibility",
    "FragmentationModel",
    "Planner",
    "Policy",
    "Reason",
    "Shape",
    "TargetWorkload",
    "Unschedulable",
    "explain",
    "feasibility",
    "make_policy",
]
