"""The task shapes the `gpupool`/`fgd` policies measure fragmentation against when the cluster
has told gpupool nothing yet: common inference slices and whole-card training. The extender's
planners and the controller's claim allocator use the same, so a claim pod is placed as the
same extended-resource pod would be."""

from __future__ import annotations

from gpupool.domain.requests import MILLI, Request
from gpupool.domain.units import GiB
from gpupool.placement.workload import TargetWorkload


def default_workload() -> TargetWorkload:
    reqs = [
        Request(name=f"m{g}", gpu_count=1, gpu_memory_bytes=g * GiB) for g in (4, 8, 12, 16, 24, 40)
    ] + [Request(name=f"w{n}", gpu_count=n, gpu_milli=MILLI) for n in (1, 2, 4, 8)]
    return TargetWorkload.from_requests(reqs, cutoff=1.0)
