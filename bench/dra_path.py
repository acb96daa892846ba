"""The DRA path's placement quality (issue 26, item 4): unallocated GPU % at 100% load; prints JSON.

    python bench/dra_path.py [--trace DIR] [--lists default] [--seeds 42-44] [--jobs 2]
                             [--standin-gib 16] [--standin-extender] [--json OUT.json]

Per openb pod list and seed, the fill experiment (`simulator/fill.py`, as bench/paper_table.py
runs it) along four paths:
- `extender`: the gpupool policy on the trace's nodes, as the extender places pods today (the
  README's figure);
- `extender_standin` (with `--standin-extender`): the same on the DRA path's nodes (the trace's
  G2/G3 cards, of undisclosed size, given `--standin-gib`; every other card as it is), slices
  reserved as the extender does: what the stand-in alone changes;
- `dra_gpupool`: gpupool's allocator on the DRA path: the same placement core, each slice
  consumed in the devices' whole steps as the live allocator writes it (`domain/dra_capacity.py`:
  a share's slice down to a whole MiB, an asked size up to one; compute up to a whole percent);
- `first_fit_by_device`: kube-scheduler alone on the DRA path: its cpu/memory node scoring and
  its allocator's first device that fits (`placement/policies/first_fit.py`), the same claims.
Means, standard deviations and per-seed figures, and the paired differences `dra_gpupool` minus
`extender` (and minus `extender_standin`) per seed. bench/results/dra_path.json is
`--standin-extender --jobs 3` (seeds 42-44: ten take too long on the shared machine). A gpupool
run takes about 50 s on one free core, first-fit about 25 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from emit import emit

from gpupool.cli.simulate import parse_seeds
from gpupool.domain.units import GiB
from gpupool.placement.policies.first_fit import FirstFitByDevicePolicy
from gpupool.simulator.dra_claims import allocate_claim, dra_nodes
from gpupool.simulator.fill import FillConfig, run_fill
from gpupool.simulator.openb import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"
PATHS = ("extender", "dra_gpupool", "first_fit_by_device")
STANDIN = "extender_standin"  # with --standin-extender


def one(job: tuple[Path, str, str, int, int]) -> tuple[float, float, int]:
    """Unallocated GPU % at 100% and 130% arrived load, and tasks refused, of one fill."""
    trace, pod_list, path, seed, standin_gib = job
    nodes = load_nodes(trace / "openb_node_list_gpu_node.csv")
    requests = [p.request for p in load_pods(trace / f"openb_pod_list_{pod_list}.csv")]
    config = FillConfig(seed=seed)
    if path == "extender":
        run = run_fill(nodes, requests, "gpupool", config)
    else:
        claimed = dra_nodes(nodes, standin_gib * GiB)
        if path == "extender_standin":
            run = run_fill(claimed, requests, "gpupool", config)
        elif path == "dra_gpupool":
            run = run_fill(claimed, requests, "gpupool", config, allocate=allocate_claim)
        else:
            policy = FirstFitByDevicePolicy(seed)
            run = run_fill(claimed, requests, policy, config, allocate=allocate_claim)
    return run.unallocated_gpu_pct[100], run.unallocated_gpu_pct[130], run.failed


def stats(v: np.ndarray) -> dict[str, object]:
    return {
        "mean": round(float(v.mean()), 4),
        "sd": round(float(v.std()), 4),
        "per_seed": [round(float(x), 4) for x in v],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--lists", default="default")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--standin-gib", type=int, default=16)
    parser.add_argument("--standin-extender", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    paths = (*PATHS, STANDIN) if args.standin_extender else PATHS
    if not (args.trace / "openb_node_list_gpu_node.csv").exists():
        print(json.dumps({"error": f"trace not found at {args.trace}"}))
        return 1
    seeds = parse_seeds(args.seeds)
    lists = args.lists.split(",")
    work = [
        (args.trace, name, p, s, args.standin_gib) for name in lists for s in seeds for p in paths
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        got = {}
        for job, figures in zip(work, pool.map(one, work), strict=True):
            got[job] = figures
            print(job[1:], figures, file=sys.stderr, flush=True)  # what a cut-short run had
    table: dict[str, object] = {}
    for name in lists:
        row: dict[str, object] = {}
        for at, k in (("100", 0), ("130", 1)):
            per = {
                p: np.array([got[(args.trace, name, p, s, args.standin_gib)][k] for s in seeds])
                for p in paths
            }
            cell: dict[str, object] = {p: stats(v) for p, v in per.items()}
            cell["dra_gpupool_minus_extender"] = stats(per["dra_gpupool"] - per["extender"])
            if STANDIN in per:
                cell["dra_gpupool_minus_extender_standin"] = stats(
                    per["dra_gpupool"] - per[STANDIN]
                )
            row[f"unallocated_gpu_pct_{at}"] = cell
        row["refused_tasks"] = {
            p: [got[(args.trace, name, p, s, args.standin_gib)][2] for s in seeds] for p in paths
        }
        table[name] = row
        print(name, json.dumps(row["unallocated_gpu_pct_100"]), file=sys.stderr)
    out = {
        "seeds": seeds,
        "standin_gib_for_g2_g3": args.standin_gib,
        "elapsed_s": round(time.perf_counter() - started),
        "lists": table,
    }
    emit(out, args.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
