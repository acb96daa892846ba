"""Time one seed of the fill experiment on the trace's `default` list, per policy; print JSON.

    python bench/fill_bench.py [--trace DIR] [--policies fgd,gpupool,best-fit] [--seed 42]

Targets from the foundation issue on a 2-core machine: fgd and gpupool <= 20 s, best-fit <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from gpupool.simulator.fill import FillConfig, run_fill
from gpupool.simulator.openb import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"
TARGET_S = {"fgd": 20.0, "gpupool": 20.0, "best-fit": 5.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--policies", default="fgd,gpupool,best-fit")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    nodes_csv = args.trace / "openb_node_list_gpu_node.csv"
    if not nodes_csv.exists():
        print(json.dumps({"error": f"trace not found at {args.trace}"}))
        return 1
    started = time.perf_counter()
    nodes = load_nodes(nodes_csv)
    requests = [p.request for p in load_pods(args.trace / "openb_pod_list_default.csv")]
    load_s = time.perf_counter() - started
    out: dict[str, object] = {
        "bench": "fill-one-seed-default",
        "seed": args.seed,
        "nodes": len(nodes),
        "tasks": len(requests),
        "load_s": round(load_s, 3),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "results": {},
    }
    results: dict[str, object] = {}
    for policy in args.policies.split(","):
        t0 = time.perf_counter()
        run = run_fill(nodes, requests, policy, FillConfig(seed=args.seed))
        seconds = time.perf_counter() - t0
        results[policy] = {
            "seconds": round(seconds, 2),
            "target_s": TARGET_S.get(policy),
            "within_target": seconds <= TARGET_S.get(policy, float("inf")),
            "tasks": run.tasks,
            "unallocated_gpu_pct_100": round(run.unallocated_gpu_pct[100], 3),
        }
    out["results"] = results
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
