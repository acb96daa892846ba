"""Trace pods as replay jobs: tenant, arrival on the compressed clock, run time, shape per mode.

Time compression. Replayed over its real timestamps the `default` trace barely touches the
cluster: its 8,152 pods arrive over 149 days and most run minutes, so at most ~66 of the 6,212
GPUs are ever requested at once (the trace is a sample of a much busier cluster). Compressing
every timestamp by the same factor would not help (concurrency is rate x duration, and both
scale). So the replay divides arrival times by a factor `time_scale` and keeps each pod's run time
as the trace gives it (`deletion_time - scheduled_time`, or `- creation_time` for pods that were
never scheduled). By default `time_scale` is chosen so that the pods' requested GPU capacity,
time-averaged over the arrival window, equals `target_load` of the cluster's GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.simulator.openb import TracePod
from gpupool.simulator.tenancy import Tenancy


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    request: Request  # the pod as the mode places it (whole cards in "whole-card")
    share_milli: int  # the GPU capacity the pod asked for, in milli-GPU, in every mode
    tenant: str
    arrival: float
    duration: float


def run_time(pod: TracePod) -> float:
    if pod.deletion_time is None:
        return 0.0
    start = pod.scheduled_time if pod.scheduled_time is not None else pod.creation_time
    return max(0.0, pod.deletion_time - start)


def offered_load(pods: Sequence[TracePod], scale: float) -> float:
    """Requested milli-GPU, time-averaged over the compressed arrival window."""
    arrivals = np.array([p.creation_time for p in pods], dtype=np.float64) / scale
    ends = arrivals + np.array([run_time(p) for p in pods], dtype=np.float64)
    share = np.array([p.request.gpu_request_milli for p in pods], dtype=np.float64)
    lo, hi = float(arrivals.min()), float(arrivals.max())
    if hi <= lo:
        return float(share.sum())
    overlap = np.clip(np.minimum(ends, hi) - np.maximum(arrivals, lo), 0.0, None)
    return float((share * overlap).sum() / (hi - lo))


def auto_time_scale(pods: Sequence[TracePod], capacity_milli: int, target_load: float) -> float:
    """The arrival compression at which the offered load is `target_load` of capacity."""
    goal = target_load * capacity_milli
    lo, hi = 0.0, 7.0  # log10 of the factor
    if offered_load(pods, 1.0) >= goal:
        return 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if offered_load(pods, 10**mid) < goal:
            lo = mid
        else:
            hi = mid
    return float(10 ** ((lo + hi) / 2))


def make_jobs(
    pods: Sequence[TracePod], tenancy: Tenancy, time_scale: float, whole_card: bool
) -> tuple[list[Job], int]:
    """Jobs in arrival order, and how many pods no tenant claims (left out)."""
    jobs: list[Job] = []
    unclaimed = 0
    start = min((p.creation_time for p in pods), default=0.0)
    for k, pod in enumerate(pods):
        rule = tenancy.assign(pod)
        if rule is None:
            unclaimed += 1
            continue
        request = replace(pod.request, tenant=rule.quota.name, priority=rule.pod_priority)
        share = request.gpu_request_milli
        if whole_card and request.is_share:
            request = replace(request, gpu_milli=MILLI)
        jobs.append(
            Job(
                id=f"{k}:{pod.request.name}",
                request=request,
                share_milli=share,
                tenant=rule.quota.name,
                arrival=(pod.creation_time - start) / time_scale,
                duration=run_time(pod),
            )
        )
    jobs.sort(key=lambda j: j.arrival)
    return jobs, unclaimed
