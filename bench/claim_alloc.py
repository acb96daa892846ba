"""The claim allocator's decision time: `controllers.dra.plan.plan_claim` (the planner over the
snapshot, restricted to the nodes that publish gpupool's slice, the claim status and the lease)
for successive 12Gi claims on snapshots of growing size, half the nodes publishing, each claim
placed on the snapshot the previous ones changed (as an admission round does); prints JSON.

    .venv/bin/python bench/claim_alloc.py [--nodes 100 500 1000] [--repeat 50]

Why: the allocator runs inside the admission round, once per admitted claim pod, so its cost adds
to the time a claim pod waits at the gate. The extender's own filter+prioritize over the same
snapshot is the comparison (bench/extender_bench.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.controllers.dra.plan import plan_claim
from gpupool.domain.devices import Gpu, Node
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB
from gpupool.placement import Planner
from gpupool.placement.default_workload import default_workload
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.state.admitted import Admitted
from gpupool.state.claim_writes import ClaimTarget
from gpupool.state.pods import PodView


def snapshot(n: int) -> ClusterSnapshot:
    nodes = [
        Node(name=f"n{i}", cpu_milli=64000, memory_mib=512 * 1024,
             gpus=tuple(Gpu(index=g, model="A100-80GB", uuid=f"n{i}-{g}") for g in range(8)))
        for i in range(n)
    ]  # fmt: skip
    return ClusterSnapshot.from_nodes(nodes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    planner = Planner("gpupool", default_workload())
    request = Request(name="p", gpu_count=1, gpu_memory_bytes=12 * GiB, compute_pct=30)
    pod = PodView(
        namespace="ns", name="p", uid="u", tenant="t", priority=0, submitted_at=0.0,
        request=request, problem=None, gated=True, gate_index=0, phase="Pending",
        deleting=False, node=None, admitted=Admitted(0.0), queue_note=None,
    )  # fmt: skip
    target = ClaimTarget("ns", "p-gpu", "cuid", "gpu", DRA_DRIVER)
    out = []
    for n in args.nodes:
        snap = snapshot(n)
        allowed = {f"n{i}" for i in range(0, n, 2)}
        t = time.perf_counter()
        plan_claim(planner, snap, pod, target, allowed)  # the first: the snapshot's caches fill
        first = time.perf_counter() - t
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            placed = plan_claim(planner, snap, pod, target, allowed)
            times.append(time.perf_counter() - t)
            snap.assume(placed.decision)  # as a round does: the next claim sees this one
        out.append({
            "nodes": n, "cards": 8 * n, "publishing": len(allowed), "repeat": args.repeat,
            "first_ms": round(first * 1000, 3),
            "median_ms": round(statistics.median(times) * 1000, 3),
            "p95_ms": round(sorted(times)[int(0.95 * len(times)) - 1] * 1000, 3),
        })  # fmt: skip
    print(json.dumps({"bench": "claim_alloc", "results": out}, indent=2))


if __name__ == "__main__":
    main()
