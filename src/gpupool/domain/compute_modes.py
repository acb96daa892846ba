"""Compute modes: whether a lease runs under MPS, and its MPS active-thread percentage. Pure.

Operators set defaults per GPU model and pod class (the ConfigMap `gpupool-compute-modes`,
decoded at the edge by `adapters.wire.compute_modes` into `ComputeModes`); a pod may ask for
itself (`gpupool.io/compute-mode: mps` or `none`). `decide_compute` gives the lease's setting:

1. the pod's own `mps` or `none` wins;
2. an exclusive or whole-GPU pod runs without MPS (it has its card alone: MPS would only add the
   daemon's overhead), whatever the defaults;
3. otherwise the pod's class (`gpupool.io/workload`: `training`, else `inference`) looks up its
   card model's default for that class, then the class's default for any model, then none: no
   MPS. Training gets no MPS unless an operator sets a training default.

The MPS percentage (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) is the pod's own compute share
(`gpupool.io/gpu-compute`) when it asks for one, else the default's `activeThreadPercentage`,
else 100 (no cap beyond the card's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from gpupool.domain.errors import GpupoolError


class InvalidComputeModes(GpupoolError):
    """The compute-modes ConfigMap has a key or value gpupool cannot read; `key` names it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"key {key!r}: {problem}")
        self.key = key


MPS = "mps"
NONE = "none"  # no MPS: the card is shared by the driver's time-slicing (or held alone)
POD_MODES = (MPS, NONE)


class WorkloadClass(Enum):
    INFERENCE = "inference"
    TRAINING = "training"

    @classmethod
    def parse(cls, text: str) -> WorkloadClass:
        for member in cls:
            if member.value == text.strip().lower():
                return member
        raise GpupoolError(f"a workload class is 'inference' or 'training'; got {text!r}")


@dataclass(frozen=True, slots=True)
class ModeDefault:
    """One ConfigMap entry: MPS on or off, and the active-thread percentage when on."""

    mps: bool
    percentage: int | None = None  # 1..100; None: the pod's compute share, else 100


@dataclass(frozen=True, slots=True)
class ComputeModes:
    """The operators' defaults: by (card model, class), and by class for any model."""

    by_model: Mapping[tuple[str, WorkloadClass], ModeDefault] = field(default_factory=dict)
    by_class: Mapping[WorkloadClass, ModeDefault] = field(default_factory=dict)

    def default_for(self, model: str, workload: WorkloadClass) -> tuple[ModeDefault, str] | None:
        """The default that applies, and where it came from (for the lease's reason)."""
        found = self.by_model.get((model, workload))
        if found is not None:
            return found, f"the compute-modes default for {model} {workload.value} pods"
        found = self.by_class.get(workload)
        if found is not None:
            return found, f"the compute-modes default for {workload.value} pods"
        return None


BUILT_IN = ComputeModes()  # no ConfigMap: no MPS unless a pod asks


@dataclass(frozen=True, slots=True)
class ComputeSetting:
    """What a lease gets: `mode` MPS or none; the percentage when MPS; why, in words."""

    mode: str  # MPS | NONE
    percentage: int | None
    why: str

    @property
    def mps(self) -> bool:
        return self.mode == MPS


def _percentage(compute_pct: int | None, default: int | None) -> int:
    if compute_pct:
        return compute_pct
    return default if default else 100


def decide_compute(
    *,
    pod_mode: str | None,
    workload: WorkloadClass,
    whole_or_exclusive: bool,
    model: str,
    compute_pct: int | None,
    modes: ComputeModes,
) -> ComputeSetting:
    """The lease's compute mode. `pod_mode`: the pod's `gpupool.io/compute-mode` (validated at
    admission: `mps`, `none` or absent); `model`: the card the lease is placed on."""
    if pod_mode == MPS:
        return ComputeSetting(MPS, _percentage(compute_pct, None), "the pod asks for MPS")
    if pod_mode == NONE:
        return ComputeSetting(NONE, None, "the pod asks for no MPS")
    if whole_or_exclusive:
        return ComputeSetting(NONE, None, "an exclusive or whole-GPU pod runs without MPS")
    found = modes.default_for(model, workload)
    if found is None:
        return ComputeSetting(NONE, None, f"no compute-modes default for {workload.value} pods")
    default, source = found
    if not default.mps:
        return ComputeSetting(NONE, None, source)
    return ComputeSetting(MPS, _percentage(compute_pct, default.percentage), source)
