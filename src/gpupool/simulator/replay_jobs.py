"""Trace pods as replay jobs: tenant, arrival on the compressed clock, run time, shape per mode.

Time and load. Replayed over its real timestamps the `default` trace barely touches the
cluster: the pod list is a capture of the pods alive around one moment (long-running pods were
created months before it, short ones minutes), so its 8,152 pods spread over 149 days and at most
~66 of the 6,212 GPUs are ever asked for at once. Compressing every timestamp alike would not help
(concurrency is arrival rate x run time, and both would scale). So the replay divides arrival times
by `time_scale` (default 10,000: the arrivals span ~21 minutes) and keeps each pod's run time as the
trace gives it (`deletion_time - scheduled_time`, or `- creation_time` for never-scheduled pods).
Even all at once, the trace asks for 98% of its cluster's GPUs, so to study contention the replay
can keep a `cluster_fraction` of the nodes (every k-th node, keeping the model mix); by default
the fraction is chosen so that the peak offered load, had no pod waited, is `target_load` (1.25)
times the cluster's GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpupool.domain.devices import Node
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
    # its gang (a name) and the gang's size: admitted and placed with the other members, all at
    # once (`quota.gang`, `placement.whatif.place_together`); the traces mark none
    gang: str | None = None
    gang_size: int = 0


def run_time(pod: TracePod) -> float:
    if pod.deletion_time is None:
        return 0.0
    start = pod.scheduled_time if pod.scheduled_time is not None else pod.creation_time
    return max(0.0, pod.deletion_time - start)


def peak_offered(pods: Sequence[TracePod], scale: float) -> int:
    """The most milli-GPU the pods ask for at once, had none of them ever waited."""
    if not pods:
        return 0
    arrivals = np.array([p.creation_time for p in pods], dtype=np.float64) / scale
    ends = arrivals + np.array([run_time(p) for p in pods], dtype=np.float64)
    share = np.array([p.request.gpu_request_milli for p in pods], dtype=np.int64)
    times = np.concatenate([ends, arrivals])
    deltas = np.concatenate([-share, share])  # at equal times departures come first
    order = np.lexsort((np.concatenate([np.zeros(len(ends)), np.ones(len(arrivals))]), times))
    return int(np.cumsum(deltas[order]).max())


def thin_nodes(nodes: Sequence[Node], fraction: float) -> list[Node]:
    """Every node with probability-free stride `fraction` (0 < fraction <= 1), keeping the mix."""
    if not 0 < fraction <= 1:
        raise ValueError(f"cluster fraction must be in (0, 1]; got {fraction}")
    kept = [n for i, n in enumerate(nodes) if int((i + 1) * fraction) > int(i * fraction)]
    return kept or list(nodes[:1])


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
            request = replace(request, gpu_milli=MILLI, gpu_memory_bytes=None, compute_pct=None)
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
