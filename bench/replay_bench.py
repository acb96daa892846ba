"""Replay speed: the full `default` trace with three tenants, three modes; prints JSON.

Target: at most 30 s on the project machine (2 cores). Skips (prints a reason) when the trace
is absent. Usage: .venv/bin/python bench/replay_bench.py [POD_LIST]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from gpupool.simulator.openb import load_nodes, load_pods
from gpupool.simulator.replay_experiment import ReplayConfig, run_experiment

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba-gpu-v2023"


def main() -> int:
    pod_list = sys.argv[1] if len(sys.argv) > 1 else "openb_pod_list_default.csv"
    nodes_path, pods_path = TRACE / "openb_node_list_gpu_node.csv", TRACE / pod_list
    if not pods_path.exists():
        print(json.dumps({"skipped": f"trace not found at {pods_path}"}))
        return 0
    started = time.perf_counter()
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    loaded = time.perf_counter()
    timings: dict[str, float] = {}
    last = [loaded]

    def tick(mode: str) -> None:
        now = time.perf_counter()
        timings[mode] = round(now - last[0], 3)
        last[0] = now

    result = run_experiment(nodes, pods, None, ReplayConfig(), progress=tick)
    total = time.perf_counter() - started
    runs = result.to_json()["runs"]
    assert isinstance(runs, dict)
    print(
        json.dumps(
            {
                "bench": "replay",
                "pods": pod_list,
                "tenants": len(result.tenancy.rules),
                "nodes": result.nodes,
                "gpus": result.gpus,
                "time_scale": result.time_scale,
                "load_s": round(loaded - started, 3),
                "mode_s": timings,
                "total_s": round(total, 3),
                "target_s": 30.0,
                "within_target": total <= 30.0,
                "gpu_allocation_pct_mean": {
                    m: r["gpu_allocation_pct_mean"] for m, r in runs.items()
                },
                "queue_delay_s_p95": {m: r["queue_delay_s_p95"] for m, r in runs.items()},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
