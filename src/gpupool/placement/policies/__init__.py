"""Scoring policies by name."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.errors import InvalidRequest
from gpupool.placement.policies.base import Policy
from gpupool.placement.policies.fgd import FgdPolicy
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.policies.simple import (
    BestFitPolicy,
    BinpackPolicy,
    DotProductPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    RandomPolicy,
    SpreadPolicy,
)
from gpupool.placement.workload import TargetWorkload

Factory = Callable[[TargetWorkload | None, int], Policy]


def _needs(workload: TargetWorkload | None, name: str) -> TargetWorkload:
    if workload is None:
        raise InvalidRequest(f"policy {name!r} needs a target workload (the expected task shapes)")
    return workload


POLICIES: dict[str, Factory] = {
    "random": lambda _w, seed: RandomPolicy(seed),
    "binpack": lambda _w, _s: BinpackPolicy(),
    "spread": lambda _w, _s: SpreadPolicy(),
    "best-fit": lambda _w, _s: BestFitPolicy(),
    "dot-product": lambda _w, _s: DotProductPolicy(),
    "gpu-packing": lambda _w, _s: GpuPackingPolicy(),
    "gpu-clustering": lambda _w, _s: GpuClusteringPolicy(),
    "fgd": lambda w, _s: FgdPolicy(_needs(w, "fgd")),
    "gpupool": lambda w, _s: GpupoolPolicy(_needs(w, "gpupool")),
}


def make_policy(name: str, workload: TargetWorkload | None = None, seed: int = 0) -> Policy:
    factory = POLICIES.get(name)
    if factory is None:
        raise InvalidRequest(
            f"unknown placement policy {name!r}; choose one of {', '.join(POLICIES)}"
        )
    return factory(workload, seed)


__all__ = ["POLICIES", "Policy", "make_policy"]
