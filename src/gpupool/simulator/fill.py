"""The FGD paper's `fill` experiment: each task submitted once, in a shuffled order; none leaves.

Per seed: shuffle the tasks; inflate the list to 130% of the cluster's GPU capacity by cloning
random tasks (or drop random tasks if it asks for more); give the nodes a random fixed order (the
paper's simulator breaks score ties by node name, and names get a random prefix per seed); then
submit each task once. After every task, log arrived GPU load and allocated GPU load (both as
% of capacity) and the cluster's fragmentation against the target workload. Points at 80/100/130%
are read by rounding arrived load to a whole percent and averaging the samples at that percent,
as the paper's analysis scripts do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpupool.domain.devices import Node
from gpupool.domain.errors import InvalidRequest
from gpupool.domain.requests import Request
from gpupool.placement.fragmentation import FragmentationModel
from gpupool.placement.planner import Planner
from gpupool.placement.policies import Policy
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.verdict import Unschedulable
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.load import nominal_gpu_milli

Progress = Callable[[int], None]
# How a task is placed: the planner's choice by default; the DRA path rounds it to the devices'
# capacity steps (`dra_claims.allocate_claim`)
Allocate = Callable[[Planner, ClusterSnapshot, Request], Decision | Unschedulable]


def _plan(planner: Planner, snap: ClusterSnapshot, req: Request) -> Decision | Unschedulable:
    return planner.plan(snap, req)


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
        out: dict[str, object] = {
            "seed": self.seed,
            "tasks": self.tasks,
            "placed": self.placed,
            "failed": self.failed,
        }
        tables = (
            ("unallocated_gpu_pct", self.unallocated_gpu_pct),
            ("frag_rate_pct", self.frag_rate_pct),
            ("frag_amount_pct", self.frag_amount_pct),
        )
        for prefix, table in tables:
            for point, value in table.items():
                out[f"{prefix}_{point}"] = None if math.isnan(value) else round(value, 4)
        out["curve"] = [[round(a, 2), round(b, 3)] for a, b in self.curve]
        return out


def inflate(
    requests: Sequence[Request],
    load: Sequence[int],
    capacity_milli: int,
    factor: float,
    rng: np.random.Generator,
) -> tuple[list[Request], list[int]]:
    """Shuffle, then clone random tasks (or drop random GPU tasks) until the load hits target.

    `load[i]` is request i's GPU load in milli-GPU; the result pairs each task with its load.
    """
    order = [int(i) for i in rng.permutation(len(requests))]
    target = factor * capacity_milli
    total = sum(load)
    if total <= 0:
        raise InvalidRequest(
            "the workload asks for no GPU at all; nothing to fill the cluster with"
        )
    clones: list[int] = []
    while total < target:
        src = int(rng.integers(len(requests)))
        clones.append(src)
        total += load[src]
    order.extend(clones)
    while total > target:
        pos = int(rng.integers(len(order)))
        if load[order[pos]] == 0:
            continue
        total -= load[order.pop(pos)]
    tasks = [
        requests[i] if n < len(requests) else replace(requests[i], name=f"{requests[i].name}~{n}")
        for n, i in enumerate(order)
    ]
    return tasks, [load[i] for i in order]


def prepare(
    nodes: Sequence[Node], requests: Sequence[Request], config: FillConfig
) -> tuple[ClusterSnapshot, list[Request], list[int], np.random.Generator]:
    """The snapshot and the seed's inflated task list (with loads); deterministic per seed."""
    rng = np.random.default_rng(config.seed)
    snap = ClusterSnapshot(nodes)
    load = [nominal_gpu_milli(snap, r) for r in requests]
    tasks, task_load = inflate(requests, load, snap.total_gpu_milli(), config.inflation, rng)
    return snap, tasks, task_load, rng


def task_count(nodes: Sequence[Node], requests: Sequence[Request], config: FillConfig) -> int:
    return len(prepare(nodes, requests, config)[1])


def run_fill(
    nodes: Sequence[Node],
    requests: Sequence[Request],
    policy: str | Policy,
    config: FillConfig = FillConfig(),
    progress: Progress | None = None,
    allocate: Allocate = _plan,
) -> FillRun:
    """One seed of the fill experiment with a policy by name, or a policy built by the caller
    for this workload (`TargetWorkload.from_requests(requests, cutoff=popularity_cutoff)`);
    `allocate` turns the planner's choice into what is reserved (the extender path: as is)."""
    snap, tasks, task_load, rng = prepare(nodes, requests, config)
    workload = TargetWorkload.from_requests(requests, cutoff=config.popularity_cutoff)
    planner = Planner(policy, workload, seed=config.seed, rank=rng.permutation(len(snap)))
    frag_model = FragmentationModel(snap, workload)
    all_rows = np.arange(len(snap))
    node_frag = frag_model.node_frag(all_rows, snap.cpu_free, snap.share_free)
    changed = np.zeros(len(snap), dtype=bool)  # nodes placed on since node_frag was measured
    capacity = snap.total_gpu_milli()

    name = policy if isinstance(policy, str) else policy.name
    run = FillRun(policy=name, seed=config.seed, tasks=len(tasks))
    samples: dict[int, list[tuple[float, float, float]]] = {p: [] for p in config.checkpoints}
    arrived = 0
    allocated = 0  # the nominal load of placed tasks, so allocation never exceeds arrival
    last_curve_pct = -1.0
    for n, (req, req_load) in enumerate(zip(tasks, task_load, strict=True), start=1):
        result = allocate(planner, snap, req)
        if isinstance(result, Decision):
            snap.assume(result)
            allocated += req_load
            run.placed += 1
            changed[result.node_index] = True
        else:
            run.failed += 1
        arrived += req_load
        arrived_pct = 100.0 * arrived / capacity
        alloc_pct = 100.0 * allocated / capacity
        point = math.floor(arrived_pct + 0.5)
        if point in samples:
            # re-measured only here, in one batch: the measure is read at the checkpoints alone
            rows = np.flatnonzero(changed)
            node_frag[rows] = frag_model.node_frag(rows, snap.cpu_free[rows], snap.share_free[rows])
            changed[:] = False
            frag = float(node_frag.sum())
            idle = capacity - snap.allocated_gpu_milli()  # free share on the cards
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
        if values:
            arr = np.array(values)
            run.unallocated_gpu_pct[point] = 100.0 - float(arr[:, 0].mean())
            run.frag_rate_pct[point] = float(arr[:, 1].mean())
            run.frag_amount_pct[point] = float(arr[:, 2].mean())
        else:  # the load jumped over this percent (a small cluster): interpolate allocation
            arrived_axis, alloc_axis = zip(*run.curve, strict=True)
            run.unallocated_gpu_pct[point] = 100.0 - float(
                np.interp(point, arrived_axis, alloc_axis)
            )
            run.frag_rate_pct[point] = math.nan
            run.frag_amount_pct[point] = math.nan
    return run
