"""The pure parts of bench/live_replay.py: a trace row as the pod a user would write, the
simulator's figure for the same pods in the same order, and the latency percentiles.

A trace task asks for a share of a card (`gpu_milli`), a figure a pod cannot say: gpupool's pod
language is bytes (`gpupool.io/gpu-memory`) and a compute percentage (`gpupool.io/gpu-compute`),
or whole cards (`gpupool.io/gpu`). So a share task becomes `milli/1000` of the cluster's
smallest card in bytes (so that every card can take it) and `ceil(milli/10)` % of compute; a
whole-card task asks for `gpupool.io/gpu: N`; a CPU-only task asks for CPU and memory only and
never meets gpupool. The simulator's figure beside the live one is computed on exactly these
translated requests, so the two differ only by what the live path does differently.

The trace's G2 and G3 cards have no known memory size, and the live system places byte slices
only on cards whose memory it knows; `substitute_unknown` gives their nodes a stand-in model (the
same cluster, sizes made up) so that the share tasks have the whole cluster to land on.

The live cluster's cards offer slices their memory less the node's reserve (10 % by default), so
the simulator's figure beside the live one places on such cards too (`with_reserve`); on whole
cards the `default` list leaves 10.6 % unallocated, on the live cluster's 11.2 %.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpupool.adapters.wire.names import RES_GPU, RES_GPU_COMPUTE, RES_GPU_MEMORY
from gpupool.domain.devices import Node, uniform_node
from gpupool.domain.models import get_model
from gpupool.domain.requests import MILLI, Request
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT, allocatable_bytes
from gpupool.domain.units import MiB
from gpupool.placement.planner import Planner
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.load import nominal_gpu_milli


def substitute_unknown(nodes: Sequence[Node], model: str) -> list[Node]:
    """The nodes, those whose cards' memory is unknown given `model`'s cards instead."""
    stand_in = get_model(model)
    if not stand_in.known:
        raise ValueError(f"the stand-in model {model!r} has no known memory size either")
    out: list[Node] = []
    for node in nodes:
        if node.gpus and not get_model(node.gpus[0].model).known:
            node = uniform_node(
                node.name,
                cpu_milli=node.cpu_milli,
                memory_mib=node.memory_mib,
                gpu_count=len(node.gpus),
                model=stand_in.name,
            )
        out.append(node)
    return out


def smallest_card_mib(nodes: Iterable[Node]) -> int:
    """The memory of the smallest card of a known size, in MiB (what a share is carved from)."""
    sizes = [
        memory // MiB
        for node in nodes
        for gpu in node.gpus
        if (memory := get_model(gpu.model).memory_bytes) is not None
    ]
    if not sizes:
        raise ValueError("no card of a known memory size: a share has nothing to be sized on")
    return min(sizes)


def pod_request(task: Request, namespace: str, card_mib: int) -> Request:
    """What the webhook will read off the pod written for `task` (a trace row's request)."""
    base = Request(
        name=task.name, cpu_milli=task.cpu_milli, memory_mib=task.memory_mib, tenant=namespace
    )
    if not task.wants_gpu:
        return base
    if task.whole_cards:
        return replace(base, gpu_count=task.gpu_count, gpu_milli=MILLI)
    milli = task.gpu_milli or MILLI
    return replace(
        base,
        gpu_count=task.gpu_count,
        gpu_memory_bytes=milli * card_mib // MILLI * MiB,
        compute_pct=min(100, math.ceil(milli / 10)),
    )


IMAGE = "registry.example/live-replay:1"  # kwok nodes run no container: any name does


def pod_manifest(request: Request) -> dict[str, Any]:
    """The pod a user writes for `request` (in its tenant's namespace): gpupool's resources in
    the limits (the webhook copies them to the requests and adds gpupool.io/vgpu)."""
    resources: dict[str, str] = {"cpu": f"{request.cpu_milli}m"}
    if request.memory_mib:
        resources["memory"] = f"{request.memory_mib}Mi"
    gpu: dict[str, str] = {}
    if request.gpu_memory_bytes is not None:
        gpu[RES_GPU_MEMORY] = f"{request.gpu_memory_bytes // MiB}Mi"
        if request.compute_pct is not None:
            gpu[RES_GPU_COMPUTE] = str(request.compute_pct)
        if request.gpu_count > 1:
            gpu[RES_GPU] = str(request.gpu_count)
    elif request.wants_gpu:
        gpu[RES_GPU] = str(request.gpu_count)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": request.name, "namespace": request.tenant},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {"limits": {**resources, **gpu}, "requests": resources},
                }
            ]
        },
    }


@dataclass(frozen=True, slots=True)
class InOrderFill:
    """The simulator's placement of the requests in the given order, none leaving."""

    placed: tuple[tuple[str, str], ...]  # (request, node) in order
    failed: tuple[str, ...]
    unallocated_gpu_pct: float  # 100 - nominal GPU load of the placed ones / capacity
    unallocated_on_cards_pct: float  # the same read off the cards (a card by its larger use)


def with_reserve(nodes: Sequence[Node], reserve_pct: float = DEFAULT_RESERVE_PCT) -> list[Node]:
    """The nodes as the live cluster's extender sees them: each card's memory less the node's
    reserve (`domain.reserve`: driver, context and MPS overheads, 10 % by default), which no
    slice may take. The trace's cards, and `gpupool simulate`'s, are whole."""
    return [
        replace(
            node,
            gpus=tuple(
                replace(gpu, memory_bytes=allocatable_bytes(total, reserve_pct))
                if (total := gpu.total_memory)
                else gpu
                for gpu in node.gpus
            ),
        )
        for node in nodes
    ]


def fill_in_order(
    nodes: Sequence[Node],
    requests: Sequence[Request],
    policy: str,
    workload: TargetWorkload,
    reserve_pct: float = 0.0,
) -> InOrderFill:
    """`gpupool simulate fill`'s placement loop without its shuffle and inflation: each request
    once, in order, ties to the first node in the list (kube-scheduler breaks them at random).
    `reserve_pct`: placed on the cards less that reserve (`with_reserve`: what the live cluster
    offers slices); the unallocated figure is always read against `nodes` as given."""
    snap = ClusterSnapshot(with_reserve(nodes, reserve_pct) if reserve_pct else nodes)
    planner = Planner(policy, workload)
    placed: list[tuple[str, str]] = []
    failed: list[str] = []
    for request in requests:
        result = planner.plan(snap, request)
        if isinstance(result, Decision):
            snap.assume(result)
            placed.append((request.name, snap.nodes[result.node_index].name))
        else:
            failed.append(request.name)
    by_name = {r.name: r for r in requests}
    capacity = snap.total_gpu_milli()
    return InOrderFill(
        placed=tuple(placed),
        failed=tuple(failed),
        unallocated_gpu_pct=unallocated_gpu_pct(nodes, [by_name[n] for n, _ in placed]),
        unallocated_on_cards_pct=100.0 * (capacity - snap.allocated_gpu_milli()) / capacity,
    )


def unallocated_gpu_pct(nodes: Sequence[Node], placed: Iterable[Request]) -> float:
    """100 minus the nominal GPU load of the placed requests as % of the cluster's GPUs (FGD's
    unallocated GPU %, the simulator's measure of a byte request against the mean card)."""
    snap = ClusterSnapshot(nodes)
    capacity = snap.total_gpu_milli()
    allocated = sum(nominal_gpu_milli(snap, r) for r in placed)
    return 100.0 * (capacity - allocated) / capacity


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100; got {q}")
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def latency_ms(seconds: Sequence[float]) -> dict[str, float | int] | None:
    """count, p50, p99 and max of durations given in seconds, in milliseconds."""
    if not seconds:
        return None
    return {
        "count": len(seconds),
        "p50_ms": round(1000 * percentile(seconds, 50), 1),
        "p99_ms": round(1000 * percentile(seconds, 99), 1),
        "max_ms": round(1000 * max(seconds), 1),
    }
