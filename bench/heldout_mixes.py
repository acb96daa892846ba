"""gpupool vs fgd on mixes the shared trace does not have; prints JSON.

    python bench/heldout_mixes.py [--trace DIR] [--seeds 42-44] [--jobs 1]

Two synthetic variants of `openb_pod_list_default.csv`, made with a fixed random seed (7):
- `gpuspec`: 25% of the GPU tasks accept only one or two GPU models (as the paper's held-back
  `gpuspec` lists do);
- `multigpu`: 30% of the 1-GPU tasks become 2-, 4- or 8-GPU tasks (weights 5:3:2), a heavier
  multi-GPU mix (as the paper's held-back `multigpu` lists do).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpupool.cli.simulate import parse_seeds
from gpupool.domain.requests import Request
from gpupool.simulator.fill import FillConfig, run_fill
from gpupool.simulator.openb import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"
SPECS = [
    ("V100-16GB", "V100-32GB"),
    ("G2",),
    ("T4",),
    ("G2", "G3"),
    ("P100", "T4"),
    ("G3",),
    ("V100-32GB",),
]


def variant(base: list[Request], kind: str) -> list[Request]:
    rng = random.Random(7)
    out = []
    for r in base:
        if kind == "gpuspec" and r.wants_gpu and rng.random() < 0.25:
            r = replace(r, models=rng.choice(SPECS))
        if kind == "multigpu" and r.gpu_count == 1 and r.whole_cards and rng.random() < 0.3:
            r = replace(r, gpu_count=rng.choices([2, 4, 8], [5, 3, 2])[0])
        out.append(r)
    return out


def one(job: tuple[Path, str, str, int]) -> float:
    trace, policy, kind, seed = job
    nodes = load_nodes(trace / "openb_node_list_gpu_node.csv")
    base = [p.request for p in load_pods(trace / "openb_pod_list_default.csv")]
    run = run_fill(nodes, variant(base, kind), policy, FillConfig(seed=seed))
    return run.unallocated_gpu_pct[100]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    if not (args.trace / "openb_node_list_gpu_node.csv").exists():
        print(json.dumps({"error": f"trace not found at {args.trace}"}))
        return 1
    seeds = parse_seeds(args.seeds)
    jobs = [
        (args.trace, p, k, s)
        for k in ("gpuspec", "multigpu")
        for p in ("fgd", "gpupool")
        for s in seeds
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        values = dict(zip(jobs, pool.map(one, jobs), strict=True))
    out: dict[str, object] = {"seeds": seeds}
    for kind in ("gpuspec", "multigpu"):
        row = {}
        for policy in ("fgd", "gpupool"):
            v = np.array([values[(args.trace, policy, kind, s)] for s in seeds])
            row[policy] = {
                "unallocated_gpu_pct_100": round(float(v.mean()), 3),
                "std": round(float(v.std()), 3),
                "per_seed": [round(float(x), 3) for x in v],
            }
        out[kind] = row
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
