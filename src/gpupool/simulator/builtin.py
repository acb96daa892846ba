"""The built-in scenario behind `gpupool simulate` with no arguments: no files needed.

A pool shaped like many real ones: NVLink A100-80GB and H800 training nodes beside cheaper
RTX 3090 boxes, serving a generated mix of inference slices (by GPU memory, with a compute cap,
some pinned to the 80GB cards), notebooks (a quarter or half card), and 1-8 GPU training jobs.
"""

from __future__ import annotations

import random

from gpupool.domain.devices import Node, uniform_node
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB
from gpupool.simulator.scenario import Scenario

SEED = 2026


# (name prefix, nodes, cores, host memory GiB, GPUs per node, model, NVLink, NUMA nodes)
POOL = (
    ("a100", 12, 96, 1024, 8, "A100-80GB", True, 2),
    ("h800", 6, 128, 2048, 8, "H800", True, 2),
    ("rtx3090", 10, 32, 256, 4, "RTX-3090", False, 1),
)


def builtin_nodes() -> list[Node]:
    return [
        uniform_node(
            f"{prefix}-{i}",
            cpu_milli=cores * 1000,
            memory_mib=memory_gib * 1024,
            gpu_count=gpus,
            model=model,
            nvlink=nvlink,
            numa_nodes=numa,
        )
        for prefix, count, cores, memory_gib, gpus, model, nvlink, numa in POOL
        for i in range(count)
    ]


def builtin_requests(seed: int = SEED) -> list[Request]:
    rng = random.Random(seed)
    requests: list[Request] = []
    slice_sizes = [(4, 18), (8, 22), (12, 20), (16, 14), (20, 10), (24, 6), (40, 10)]
    sizes, weights = zip(*slice_sizes, strict=True)
    for i in range(700):
        gib = rng.choices(sizes, weights)[0]
        big = gib > 24 or rng.random() < 0.15
        requests.append(
            Request(
                name=f"infer-{i}",
                cpu_milli=rng.choice([2000, 4000, 4000, 8000]),
                memory_mib=rng.choice([16, 32, 64]) * 1024,
                gpu_count=1,
                gpu_memory_bytes=gib * GiB,
                compute_pct=rng.choice([10, 20, 25, 30, 50]),
                models=("A100-80GB", "H800") if big else (),
                tenant=rng.choice(["search", "ads", "assistant"]),
            )
        )
    for i in range(80):
        requests.append(
            Request(
                name=f"notebook-{i}",
                cpu_milli=2000,
                memory_mib=16 * 1024,
                gpu_count=1,
                gpu_milli=rng.choice([250, 250, 500]),
                tenant="research",
            )
        )
    for i, gpus in enumerate([1] * 60 + [2] * 30 + [4] * 20 + [8] * 10):
        requests.append(
            Request(
                name=f"train-{i}",
                cpu_milli=8000 * gpus,
                memory_mib=64 * 1024 * gpus,
                gpu_count=gpus,
                models=("H800",) if gpus == 8 and rng.random() < 0.5 else (),
                exclusive=gpus >= 4,
                tenant="research",
            )
        )
    return requests


def builtin_scenario() -> Scenario:
    return Scenario("built-in mixed pool", tuple(builtin_nodes()), tuple(builtin_requests()))
