"""gpupool vs fgd on mixes the shared trace holds back; paired per-seed differences; prints JSON.

    python bench/heldout_mixes.py [--trace DIR] [--mixes all] [--policies fgd,gpupool]
                                  [--seeds 42-51] [--jobs 2]

The mixes (`bench/mixes.py`, each a deterministic variant of `openb_pod_list_default.csv`):
- `multigpu30/40/50`: 30/40/50% of the GPU tasks are copies of the trace's own 2-, 4- and
  8-GPU tasks (with their CPU and memory);
- `multigpu30c`: 30% of the 1-GPU tasks become 2-, 4- or 8-GPU tasks (weights 5:3:2) and keep
  their small CPU request (the first, less realistic stand-in; kept because it showed a loss);
- `gpuspec25/33`: a quarter / a third of the GPU tasks accept only one model (or one V100
  family), drawn in proportion to the cards that could host them;
- `multislice25`: a quarter of the tasks asking a share of one GPU ask it on each of 2 or 4
  cards (2:1): multi-card slices, which no shared list has; `multislice25whole`: the same tasks
  taking those cards whole, as gpupool placed a multi-GPU request before it had such slices.
`builtin` (not in `all`) is `gpupool simulate`'s built-in scenario, its own nodes and pods.
Any other name is a shared pod list of the trace (`default`, `gpushare40`, ...).
Per mix: unallocated GPU % at 100% and 130% arrived load for each policy (mean, sd, per seed),
and the paired difference gpupool - fgd per seed (mean, sd, min, max; negative: gpupool better).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from gpupool.cli.simulate import parse_seeds
from gpupool.domain.devices import Node
from gpupool.domain.requests import Request
from gpupool.placement.policies import Policy
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.builtin import builtin_scenario
from gpupool.simulator.fill import FillConfig, run_fill
from gpupool.simulator.openb import load_nodes, load_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mixes import MIXES

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"


def inputs(trace: Path, mix: str) -> tuple[list[Node], list[Request]]:
    if mix == "builtin":
        scenario = builtin_scenario()
        return list(scenario.nodes), list(scenario.requests)
    nodes = load_nodes(trace / "openb_node_list_gpu_node.csv")
    if mix in MIXES:
        base = [p.request for p in load_pods(trace / "openb_pod_list_default.csv")]
        return nodes, MIXES[mix](base, nodes)
    return nodes, [p.request for p in load_pods(trace / f"openb_pod_list_{mix}.csv")]


def fill_figures(
    trace: Path, mix: str, seed: int, policy: str | Callable[[TargetWorkload], Policy]
) -> tuple[float, float]:
    """Unallocated GPU % at 100% and 130% arrived load of one fill: a policy by name, or one
    built for the mix's target workload (as `run_fill` would build it)."""
    nodes, requests = inputs(trace, mix)
    config = FillConfig(seed=seed)
    if not isinstance(policy, str):
        policy = policy(TargetWorkload.from_requests(requests, cutoff=config.popularity_cutoff))
    run = run_fill(nodes, requests, policy, config)
    return run.unallocated_gpu_pct[100], run.unallocated_gpu_pct[130]


def one(job: tuple[Path, str, str, int]) -> tuple[float, float]:
    trace, policy, mix, seed = job
    return fill_figures(trace, mix, seed, policy)


def stats(v: np.ndarray) -> dict[str, float]:
    return {
        "mean": round(float(v.mean()), 3),
        "sd": round(float(v.std()), 3),
        "min": round(float(v.min()), 3),
        "max": round(float(v.max()), 3),
    }


def against_fgd(fgd: np.ndarray, runs: dict[str, np.ndarray]) -> dict[str, object]:
    """FGD's per-seed figures and, per named run on the same seeds, its figures and its paired
    difference with FGD (negative: better), per seed and how many seeds better / worse."""
    table: dict[str, object] = {"fgd": stats(fgd)}
    for name, v in runs.items():
        d = v - fgd
        table[name] = {
            **stats(v),
            "minus_fgd": stats(d),
            "minus_fgd_per_seed": [round(float(x), 3) for x in d],
            "seeds_better_worse": [int((d < -1e-9).sum()), int((d > 1e-9).sum())],
        }
    return table


def paired_runs(
    one: Callable[[tuple[Path, str, str, int]], tuple[float, float]],
    trace: Path,
    mix: str,
    who: list[str],
    seeds: list[int],
    jobs: int,
    label: Callable[[str], str] = str,
) -> dict[str, object]:
    """`one` for FGD and every name in `who` on every seed of `mix`, as a JSON-ready table of
    each run against FGD (`against_fgd`) at 100% and 130% arrived load, under `label(name)`."""
    names = ["fgd", *who]
    work = [(trace, w, mix, s) for w in names for s in seeds]
    with ProcessPoolExecutor(jobs) as pool:
        got = dict(zip(work, pool.map(one, work), strict=True))

    def figures(w: str, k: int) -> np.ndarray:
        return np.array([got[(trace, w, mix, s)][k] for s in seeds])

    out: dict[str, object] = {"mix": mix, "seeds": seeds}
    for at, k in (("100", 0), ("130", 1)):
        runs = {label(w): figures(w, k) for w in who}
        out[f"unallocated_gpu_pct_{at}"] = against_fgd(figures("fgd", k), runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--mixes", default="all")
    parser.add_argument("--policies", default="fgd,gpupool")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not (args.trace / "openb_node_list_gpu_node.csv").exists():
        print(json.dumps({"error": f"trace not found at {args.trace}"}))
        return 1
    seeds = parse_seeds(args.seeds)
    mixes = list(MIXES) if args.mixes == "all" else args.mixes.split(",")
    policies = args.policies.split(",")
    jobs = [(args.trace, p, m, s) for m in mixes for p in policies for s in seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        values = dict(zip(jobs, pool.map(one, jobs), strict=True))
    out: dict[str, object] = {"seeds": seeds}
    for mix in mixes:
        row: dict[str, object] = {}
        for at, col in ((100, 0), (130, 1)):
            per = {
                p: np.array([values[(args.trace, p, mix, s)][col] for s in seeds]) for p in policies
            }
            cell: dict[str, object] = {
                p: {**stats(v), "per_seed": [round(float(x), 3) for x in v]} for p, v in per.items()
            }
            base, mine = policies[0], policies[-1]
            diff = per[mine] - per[base]
            cell[f"{mine}-{base}"] = {**stats(diff), "per_seed": [round(float(x), 3) for x in diff]}
            row[f"unallocated_gpu_pct_{at}"] = cell
        out[mix] = row
        print(
            mix,
            json.dumps({k: v[f"{policies[-1]}-{policies[0]}"] for k, v in row.items()}),
            file=sys.stderr,
        )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
