"""The replay experiment: the same pods and tenants run whole-card, pooled and pooled-borrowing."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpupool.domain.devices import Node
from gpupool.domain.requests import MILLI
from gpupool.placement import ClusterSnapshot, TargetWorkload
from gpupool.simulator.defaults import DEFAULT_TARGET_LOAD, DEFAULT_TIME_SCALE
from gpupool.simulator.openb import TracePod
from gpupool.simulator.replay import MODES, Engine
from gpupool.simulator.replay_defrag import ReplayDefrag
from gpupool.simulator.replay_jobs import make_jobs, peak_offered, thin_nodes
from gpupool.simulator.replay_stats import RunStats
from gpupool.simulator.tenancy import Tenancy, default_tenancy


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    policy: str = "gpupool"
    time_scale: float = DEFAULT_TIME_SCALE  # arrival times are divided by this
    cluster_fraction: float | None = None  # None: chosen so the peak offered load is target_load
    target_load: float = DEFAULT_TARGET_LOAD  # peak offered GPU request / cluster GPUs
    seed: int = 0
    modes: tuple[str, ...] = MODES
    defrag: ReplayDefrag | None = None  # also run each pooled mode with defragmentation


@dataclass(frozen=True, slots=True)
class ReplayResult:
    time_scale: float
    cluster_fraction: float
    nodes: int
    gpus: int
    tenancy: Tenancy
    runs: dict[str, RunStats]
    unclaimed: int
    pods: int

    def to_json(self) -> dict[str, object]:
        return {
            "runs": {mode: stats.to_json() for mode, stats in self.runs.items()},
            "time_scale": round(self.time_scale, 3),
            "cluster_fraction": round(self.cluster_fraction, 4),
            "nodes": self.nodes,
            "gpus": self.gpus,
            "pods": self.pods,
            "unclaimed_pods": self.unclaimed,
            "tenants": {
                r.quota.name: {
                    "qos": list(r.qos) if r.qos is not None else "rest",
                    "nominal_milli": r.quota.nominal,
                    "guaranteed_milli": r.quota.guaranteed,
                    "cohort": r.quota.cohort,
                }
                for r in self.tenancy.rules
            },
        }


def cluster_fraction(
    nodes: Sequence[Node], pods: Sequence[TracePod], config: ReplayConfig
) -> float:
    """The configured fraction, or the one at which the peak offered load is `target_load`."""
    if config.cluster_fraction is not None:
        return config.cluster_fraction
    full = ClusterSnapshot.from_nodes(nodes).total_gpu_milli()
    return min(1.0, peak_offered(pods, config.time_scale) / (config.target_load * full))


@dataclass(frozen=True, slots=True)
class Setup:
    """What every run of an experiment shares: the kept nodes, the tenants, the target workload."""

    nodes: list[Node]
    fraction: float
    capacity_milli: int
    tenancy: Tenancy
    workload: TargetWorkload


def setup(
    nodes: Sequence[Node], pods: Sequence[TracePod], tenancy: Tenancy | None, config: ReplayConfig
) -> Setup:
    fraction = cluster_fraction(nodes, pods, config)
    kept = thin_nodes(nodes, fraction)
    capacity = ClusterSnapshot.from_nodes(kept).total_gpu_milli()
    if tenancy is None:
        tenancy = default_tenancy(pods, capacity)
    workload = TargetWorkload.from_requests([p.request for p in pods])
    return Setup(kept, fraction, capacity, tenancy, workload)


def state_at(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    tenancy: Tenancy | None,
    config: ReplayConfig,
    mode: str,
    at: float | None = None,
) -> Engine:
    """One mode's replay stopped at replay time `at` (default: the last arrival), as it stands."""
    ready = setup(nodes, pods, tenancy, config)
    jobs, _ = make_jobs(pods, ready.tenancy, config.time_scale, whole_card=mode == "whole-card")
    engine = Engine.create(
        mode, ready.nodes, jobs, ready.tenancy, config.policy, ready.workload, config.seed
    )
    engine.run(until=math.nextafter(engine.horizon[1], math.inf) if at is None else at)
    return engine


def run_experiment(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    tenancy: Tenancy | None = None,
    config: ReplayConfig = ReplayConfig(),
    progress: Callable[[str], None] | None = None,
) -> ReplayResult:
    scale = config.time_scale
    ready = setup(nodes, pods, tenancy, config)
    nodes, fraction, capacity = ready.nodes, ready.fraction, ready.capacity_milli
    tenancy, workload = ready.tenancy, ready.workload
    runs: dict[str, RunStats] = {}
    unclaimed = 0
    for mode in config.modes:
        jobs, unclaimed = make_jobs(pods, tenancy, scale, whole_card=mode == "whole-card")
        # whole cards leave no fragments to clear: defragmentation runs beside the pooled modes
        variants = (
            [None] if config.defrag is None or mode == "whole-card" else [None, config.defrag]
        )
        for defrag in variants:
            engine = Engine.create(
                mode, nodes, jobs, tenancy, config.policy, workload, config.seed, defrag
            )
            stats = engine.run()
            runs[stats.mode] = stats
            if progress is not None:
                progress(stats.mode)
    return ReplayResult(
        scale, fraction, len(nodes), capacity // MILLI, tenancy, runs, unclaimed, len(pods)
    )
