"""The FGD paper's `fill` experiment: every task submitted once, in a shuffled order, nothing leaves.

Per seed: shuffle the tasks; inflate the list to 130% of the cluster's GPU capacity by cloning
random tasks (or drop random tasks if it asks for more); give the nodes a random fixed order (the
paper's simulator breaks score ties by node name, and names get a random prefix per seed); then
submit each task once. After every task, log arrived GPU load and allocated GPU capacity (both as
% of capacity) and the cluster's fragmentation against the target workload. Points at 80/100/130%
are read by rounding arrived load to a whole percent and averaging the samples at that percent,
as the paper's analysis scripts do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpupool.domain.devices import Node
from gpupool.domain.requests import Request
from gpupool.placement.fragmentation import FragmentationModel
from gpupool.placement.planner import Planner
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.workload import TargetWorkload

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class FillConfig:
    seed: int = 42
    inflation: float = 1.3
    popularity_cutoff: float = 0.95
    checkpoints: tuple[int, ...] = (80, 100, 130)


@dataclass(slots=True)
class FillRun:
    policy: str
    seed: int
    tasks: int = 0
    placed: int = 0
    failed: int = 0
    unallocated_gpu_pct: dict[int, float] = field(default_factory=dict)
    frag_rate_pct: dict[int, float] = field(default_factory=dict)
    frag_amount_pct: dict[int, float] = field(default_factory=dict)
    curve: list[tuple[float, float]] = field(default_factory=list)  # (arrived %, allocated %)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"seed": self.seed, "tasks": self.tasks, "placed": self.placed,
                                  "failed": self.failed}
        for point, value in self.unallocated_gpu_pct.items():
            out[f"unallocated_gpu_pct_{point}"] = round(value, 4)
        for point, value in self.frag_rate_pct.items():
            out[f"frag_rate_pct_{point}"] = round(value, 4)
        for point, value in self.frag_amount_pct.items():
            out[f"frag_amount_pct_{point}"] = round(value, 4)
        out["curve"] = [[round(a, 2), round(b, 3)] for a, b in self.curve]
        return out


def inflate(requests: Sequence[Request], capacity_milli: int, factor: float,
            rng: np.random.Generator) -> list[Request]:
    """Shuffle, then clone random tasks (or drop random ones) until the GPU request hits target."""
    order = [requests[i] for i in rng.permutation(len(requests))]
    target = factor * capacity_milli
    total = sum(r.gpu_request_milli for r in order)
    clones = 0
    while total < target:
        src = order[int(rng.integers(len(requests)))]
        clones += 1
        clone = _renamed(src, f"{src.name}-clone-{clones}")
        order.append(clone)
        total += clone.gpu_request_milli
    while total > target and order:
        victim = int(rng.integers(len(order)))
        if order[victim].gpu_request_milli == 0:
            continue_if_only_cpu = any(r.gpu_request_milli for r in order)
            if continue_if_only_cpu:
                continue
        total -= order.pop(victim).gpu_request_milli
        if total <= target:
            break
    return order


def _renamed(req: Request, name: str) -> Request:
    from dataclasses import replace

    return replace(req, name=name)


def run_fill(
    nodes: Sequence[Node],
    requests: Sequence[Request],
    policy: str,
    config: FillConfig = FillConfig(),
    progress: Progress | None = None,
) -> FillRun:
    rng = np.random.default_rng(config.seed)
    snap = ClusterSnapshot(nodes)
    workload = TargetWorkload.from_requests(requests, cutoff=config.popularity_cutoff)
    tasks = inflate(requests, snap.total_gpu_milli(), config.inflation, rng)
    planner = Planner(policy, workload, seed=config.seed, rank=rng.permutation(len(snap)))
    frag_model = FragmentationModel(snap, workload)
    all_rows = np.arange(len(snap))
    node_frag = frag_model.node_frag(all_rows, snap.cpu_free, snap.share_free)
    capacity = snap.total_gpu_milli()

    run = FillRun(policy=policy, seed=config.seed, tasks=len(tasks))
    samples: dict[int, list[tuple[float, float, float]]] = {p: [] for p in config.checkpoints}
    arrived = 0
    allocated = 0
    last_curve_pct = -1.0
    for n, req in enumerate(tasks, start=1):
        result = planner.plan(snap, req)
        if isinstance(result, Decision):
            snap.assume(result)
            allocated += req.gpu_request_milli
            run.placed += 1
            i = np.array([result.node_index])
            node_frag[i] = frag_model.node_frag(i, snap.cpu_free[i], snap.share_free[i])
        else:
            run.failed += 1
        arrived += req.gpu_request_milli
        arrived_pct = 100.0 * arrived / capacity
        alloc_pct = 100.0 * allocated / capacity
        point = int(math.floor(arrived_pct + 0.5))
        if point in samples:
            frag = float(node_frag.sum())
            idle = capacity - allocated
            samples[point].append(
                (alloc_pct, 100.0 * frag / idle if idle else 0.0, 100.0 * frag / capacity)
            )
        if arrived_pct - last_curve_pct >= 0.5:
            run.curve.append((arrived_pct, alloc_pct))
            last_curve_pct = arrived_pct
        if progress is not None and n % 256 == 0:
            progress(256)
    if progress is not None:
        progress(len(tasks) % 256)
    run.curve.append((100.0 * arrived / capacity, 100.0 * allocated / capacity))
    for point, values in samples.items():
        if not values:  # the load jumped over this percent: take the nearest logged point
            alloc = float(np.interp(point, *zip(*run.curve, strict=True)))
            values = [(alloc, math.nan, math.nan)]
        arr = np.array(values)
        run.unallocated_gpu_pct[point] = 100.0 - float(arr[:, 0].mean())
        run.frag_rate_pct[point] = float(np.nanmean(arr[:, 1])) if len(arr) else math.nan
        run.frag_amount_pct[point] = float(np.nanmean(arr[:, 2])) if len(arr) else math.nan
    return run
