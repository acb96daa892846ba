"""Run the fill experiment for several policies and seeds, in parallel, and aggregate."""

from __future__ import annotations

import math
import multiprocessing
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpupool.domain.devices import Node
from gpupool.domain.requests import Request
from gpupool.simulator.fill import FillConfig, FillRun, run_fill

METRICS = (
    "unallocated_gpu_pct_100",
    "unallocated_gpu_pct_130",
    "frag_rate_pct_80",
    "frag_amount_pct_80",
)


@dataclass(frozen=True, slots=True)
class FillJob:
    nodes: Sequence[Node]
    requests: Sequence[Request]
    policy: str
    config: FillConfig


def _metric(run: FillRun, key: str) -> float:
    kind, _, point = key.rpartition("_")
    table = {
        "unallocated_gpu_pct": run.unallocated_gpu_pct,
        "frag_rate_pct": run.frag_rate_pct,
        "frag_amount_pct": run.frag_amount_pct,
    }[kind]
    return table.get(int(point), math.nan)


def aggregate(runs: Sequence[FillRun]) -> dict[str, Any]:
    """Means (and standard deviations) over seeds, plus every run."""
    out: dict[str, Any] = {}
    for key in METRICS:
        values = np.array([_metric(r, key) for r in runs], dtype=float)
        values = values[~np.isnan(values)]
        out[key] = round(float(values.mean()), 4) if len(values) else None
        out[f"{key}_std"] = round(float(values.std()), 4) if len(values) else None
    out["seeds"] = [r.seed for r in runs]
    out["runs"] = [r.to_json() for r in runs]
    return out


def _work(job: FillJob, channel: Any) -> FillRun:
    def report(n: int) -> None:
        channel.put(n)

    return run_fill(job.nodes, job.requests, job.policy, job.config, report)


def run_experiment(
    nodes: Sequence[Node],
    requests: Sequence[Request],
    policies: Sequence[str],
    seeds: Sequence[int],
    jobs: int = 1,
    progress: Callable[[int], None] | None = None,
    base: FillConfig | None = None,
) -> dict[str, dict[str, Any]]:
    """{policy: aggregate} for every policy over every seed."""
    base = base or FillConfig()
    work = [
        FillJob(nodes, requests, p, FillConfig(s, base.inflation, base.popularity_cutoff))
        for p in policies
        for s in seeds
    ]
    runs: list[FillRun]
    if jobs <= 1 or len(work) == 1:
        runs = [run_fill(j.nodes, j.requests, j.policy, j.config, progress) for j in work]
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Manager() as manager, ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            channel = manager.Queue()
            futures: list[Future[FillRun]] = [pool.submit(_work, j, channel) for j in work]
            while not all(f.done() for f in futures):
                try:
                    n = channel.get(timeout=0.2)
                except queue.Empty:
                    continue
                if progress is not None:
                    progress(n)
            runs = [f.result() for f in futures]
            while progress is not None and not channel.empty():
                progress(channel.get())
    by_policy: dict[str, list[FillRun]] = {p: [] for p in policies}
    for run in runs:
        by_policy[run.policy].append(run)
    return {p: aggregate(r) for p, r in by_policy.items()}


def curve_on_grid(
    runs: Sequence[dict[str, Any]], grid: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Mean allocation ratio over seeds, interpolated on arrived-load `grid`."""
    curves = []
    for run in runs:
        points = np.array(run["curve"], dtype=float)
        curves.append(np.interp(grid, points[:, 0], points[:, 1], right=np.nan))
    stacked = np.array(curves)
    counts = (~np.isnan(stacked)).sum(axis=0)
    sums = np.nansum(stacked, axis=0)
    mean = np.divide(sums, counts, out=np.full(len(grid), np.nan), where=counts > 0)
    return np.asarray(mean, dtype=np.float64)
