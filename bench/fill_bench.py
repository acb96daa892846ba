"""Time one seed of the fill experiment on the trace's `default` list, per policy, against the
numpy yardstick in the same run; print JSON.

    python bench/fill_bench.py [--trace DIR] [--policies fgd,gpupool,best-fit] [--seed 42]
                               [--repeat 5]

The yardstick (bench/numpy_fill.py: FGD's fill written straight in numpy, which gives fgd's
numbers) runs just before each policy run, in `--repeat` rounds; `ratio` is the median over the
rounds of a policy's CPU seconds over the yardstick's just before it (process CPU time, which
other load disturbs less than the wall clock; medians of both are printed), and each round's
ratio is printed too.
Target (issue 13): ratio <= 3 for fgd, gpupool and best-fit. `placed` and the allocation
figures are printed so that a speed change can be checked to move no placement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from numpy_fill import fill as yardstick_fill

from gpupool.simulator.fill import FillConfig, FillRun, run_fill
from gpupool.simulator.openb import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"
TARGET_RATIO = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--policies", default="fgd,gpupool,best-fit")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=5, help="paired rounds per policy")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
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
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "results": {},
    }
    policies = args.policies.split(",")
    # Each policy run is paired with a yardstick run just before it, `--repeat` rounds: this
    # machine's speed drifts by up to 2x over tens of seconds, so only a ratio of two runs
    # side by side means anything; the figure is the median of the paired ratios.
    cpu: dict[str, list[float]] = {name: [] for name in ["yardstick", *policies]}
    wall: dict[str, list[float]] = {name: [] for name in cpu}
    ratios: dict[str, list[float]] = {name: [] for name in policies}
    runs: dict[str, FillRun] = {}
    for _ in range(args.repeat):
        for policy in policies:
            w0, c0 = time.perf_counter(), time.process_time()
            ref = yardstick_fill(nodes_csv, args.trace / "openb_pod_list_default.csv", args.seed)
            wall["yardstick"].append(time.perf_counter() - w0)
            ref_cpu = time.process_time() - c0
            cpu["yardstick"].append(ref_cpu)
            w0, c0 = time.perf_counter(), time.process_time()
            runs[policy] = run_fill(nodes, requests, policy, FillConfig(seed=args.seed))
            wall[policy].append(time.perf_counter() - w0)
            cpu[policy].append(time.process_time() - c0)
            ratios[policy].append(cpu[policy][-1] / ref_cpu)
    out["yardstick"] = {
        "seconds_median": round(statistics.median(wall["yardstick"]), 2),
        "cpu_seconds_median": round(statistics.median(cpu["yardstick"]), 2),
        "cpu_seconds_range": [round(min(cpu["yardstick"]), 2), round(max(cpu["yardstick"]), 2)],
        "placed": ref.placed,
        "unallocated_gpu_pct_100": round(ref.unallocated_gpu_pct[100], 4),
        "unallocated_gpu_pct_130": round(ref.unallocated_gpu_pct[130], 4),
    }
    results: dict[str, object] = {}
    for policy in policies:
        run = runs[policy]
        ratio = statistics.median(ratios[policy])
        results[policy] = {
            "seconds_median": round(statistics.median(wall[policy]), 2),
            "cpu_seconds_median": round(statistics.median(cpu[policy]), 2),
            "ratio": round(ratio, 2),
            "ratio_per_round": [round(r, 2) for r in ratios[policy]],
            "target_ratio": TARGET_RATIO,
            "within_target": ratio <= TARGET_RATIO,
            "tasks": run.tasks,
            "placed": run.placed,
            "unallocated_gpu_pct_100": round(run.unallocated_gpu_pct[100], 4),
            "unallocated_gpu_pct_130": round(run.unallocated_gpu_pct[130], 4),
        }
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    out["results"] = results
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
