"""Defragmentation in the replay, with and without: prints JSON; writes a plot if asked.

Runs the built-in pool's day and the Alibaba `default` pod list (from ../shared, not copied here;
skipped when absent) in the pooled mode, without and with `--defrag THRESHOLD,INTERVAL`, and
reports per run: pool fragmentation (peak, mean, end), allocation, queueing delay, moves and the
GPU-hours the moved pods lost to their restarts.
Usage: .venv/bin/python bench/defrag_replay.py [THRESHOLD,INTERVAL_BUILTIN,INTERVAL_TRACE]
       [--plot PREFIX]   (default 10,600,60; PREFIX-builtin.png and PREFIX-trace.png)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gpupool.simulator.builtin import builtin_nodes
from gpupool.simulator.builtin_timeline import builtin_tenancy, builtin_timeline
from gpupool.simulator.openb import load_nodes, load_pods
from gpupool.simulator.replay_defrag import ReplayDefrag
from gpupool.simulator.replay_experiment import ReplayConfig, ReplayResult, run_experiment
from gpupool.simulator.replay_report import plot

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba-gpu-v2023"
if not TRACE.exists():  # a worktree beside the main checkout
    TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-gpu-v2023"
KEYS = (
    "fragmentation_pct_peak",
    "fragmentation_pct_mean",
    "fragmentation_pct_end",
    "in_use_fragmentation_pct_peak",
    "in_use_fragmentation_pct_mean",
    "gpu_allocation_pct_mean",
    "queue_delay_s_p50",
    "queue_delay_s_p95",
    "defrag_rounds",
    "defrag_moves",
    "defrag_restart_gpu_hours",
    "admitted",
    "rejected",
)


def summary(result: ReplayResult, seconds: float) -> dict[str, object]:
    runs = result.to_json()["runs"]
    assert isinstance(runs, dict)
    return {
        "nodes": result.nodes,
        "gpus": result.gpus,
        "seconds": round(seconds, 1),
        "runs": {mode: {k: run[k] for k in KEYS} for mode, run in runs.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec", nargs="?", default="10,600,60")
    parser.add_argument("--plot", help="write PREFIX-builtin.png and PREFIX-trace.png")
    parser.add_argument("--skip-trace", action="store_true")
    parser.add_argument("--policy", default="gpupool", help="placement policy (default gpupool)")
    parser.add_argument("--time-scale", type=float, default=10_000.0, help="for the trace")
    args = parser.parse_args()
    threshold, builtin_interval, trace_interval = args.spec.split(",")
    out: dict[str, object] = {
        "bench": "defrag_replay",
        "policy": args.policy,
        "threshold_pct": float(threshold),
    }

    started = time.perf_counter()
    nodes = builtin_nodes()
    builtin = run_experiment(
        nodes,
        builtin_timeline(),
        builtin_tenancy(nodes),
        ReplayConfig(
            policy=args.policy,
            time_scale=1.0,
            cluster_fraction=1.0,
            modes=("pooled",),
            defrag=ReplayDefrag.parse(f"{threshold},{builtin_interval}"),
        ),
    )
    out["builtin"] = {
        "interval_s": float(builtin_interval),
        **summary(builtin, time.perf_counter() - started),
    }
    if args.plot:
        plot(builtin, f"{args.plot}-builtin.png")

    pods_path = TRACE / "openb_pod_list_default.csv"
    if args.skip_trace or not pods_path.exists():
        out["trace"] = {
            "skipped": f"trace not found at {pods_path}" if not args.skip_trace else "--skip-trace"
        }
    else:
        started = time.perf_counter()
        trace = run_experiment(
            load_nodes(TRACE / "openb_node_list_gpu_node.csv"),
            load_pods(pods_path),
            None,
            ReplayConfig(
                policy=args.policy,
                time_scale=args.time_scale,
                modes=("pooled",),
                defrag=ReplayDefrag.parse(f"{threshold},{trace_interval}"),
            ),
        )
        out["trace"] = {
            "pods": "openb_pod_list_default.csv",
            "time_scale": trace.time_scale,
            "cluster_fraction": round(trace.cluster_fraction, 4),
            "interval_s": float(trace_interval),
            **summary(trace, time.perf_counter() - started),
        }
        if args.plot:
            plot(trace, f"{args.plot}-trace.png")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
