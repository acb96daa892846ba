"""Placement over a snapshot: filters with reasons, scoring policies, the planner.

The names below load on first use (PEP 562), so that importing a light submodule such as
`placement.autoscale` or `placement.policy_names` (as `gpupool simulate --help` does) does not
import numpy and every policy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupool.placement.filters import Feasibility, Reason, explain, feasibility
    from gpupool.placement.fragmentation import FragmentationModel
    from gpupool.placement.planner import Planner
    from gpupool.placement.policies import POLICIES, Policy, make_policy
    from gpupool.placement.snapshot import ClusterSnapshot, Decision
    from gpupool.placement.verdict import Unschedulable
    from gpupool.placement.workload import Shape, TargetWorkload

_WHERE = {
    "Feasibility": "filters",
    "Reason": "filters",
    "explain": "filters",
    "feasibility": "filters",
    "FragmentationModel": "fragmentation",
    "Planner": "planner",
    "POLICIES": "policies",
    "Policy": "policies",
    "make_policy": "policies",
    "ClusterSnapshot": "snapshot",
    "Decision": "snapshot",
    "Unschedulable": "verdict",
    "Shape": "workload",
    "TargetWorkload": "workload",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gpupool.placement' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gpupool.placement.{module}"), name)


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
