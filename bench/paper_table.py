"""The README's Results table: policies x shared traces, unallocated GPU % at 100% load.

    python bench/paper_table.py [--trace DIR] [--policies all] [--lists default,gpushare40,...]
                                [--seeds 42-51] [--jobs 2] [--json OUT.json]

Prints JSON (means and standard deviations over seeds, per policy and pod list) and, on stderr,
a Markdown table. Expect about 5 s per policy, seed and list on one core.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from emit import emit

from gpupool.cli.simulate import parse_policies, parse_seeds
from gpupool.simulator.experiment import run_experiment
from gpupool.simulator.openb import load_nodes, load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"
LISTS = (
    "default,gpushare20,gpushare40,gpushare60,gpushare80,gpushare100,"
    "cpu0,cpu037,cpu050,cpu072,cpu100,cpu200,cpu235,cpu250,cpu300"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--policies", default="all")
    parser.add_argument("--lists", default=LISTS)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not (args.trace / "openb_node_list_gpu_node.csv").exists():
        print(json.dumps({"error": f"trace not found at {args.trace}"}))
        return 1
    policies = parse_policies([args.policies])
    seeds = parse_seeds(args.seeds)
    nodes = load_nodes(args.trace / "openb_node_list_gpu_node.csv")
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    started = time.perf_counter()
    for name in args.lists.split(","):
        pods = load_pods(args.trace / f"openb_pod_list_{name}.csv")
        results = run_experiment(nodes, [p.request for p in pods], policies, seeds, jobs=args.jobs)
        table[name] = {
            p: {
                "unallocated_gpu_pct_100": r["unallocated_gpu_pct_100"],
                "unallocated_gpu_pct_100_std": r["unallocated_gpu_pct_100_std"],
                "unallocated_gpu_pct_130": r["unallocated_gpu_pct_130"],
                "frag_rate_pct_80": r["frag_rate_pct_80"],
                "frag_amount_pct_80": r["frag_amount_pct_80"],
            }
            for p, r in results.items()
        }
        print(f"{name}: done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    out = {
        "seeds": seeds,
        "policies": policies,
        "elapsed_s": round(time.perf_counter() - started),
        "lists": table,
    }
    emit(out, args.json, indent=1)
    header = "| pod list | " + " | ".join(policies) + " |"
    print(header, file=sys.stderr)
    print("|" + "---|" * (len(policies) + 1), file=sys.stderr)
    for name, row in table.items():
        cells = []
        for p in policies:
            mean = row[p]["unallocated_gpu_pct_100"]
            std = row[p]["unallocated_gpu_pct_100_std"]
            known = mean is not None and std is not None
            cells.append(f"{mean:.2f} ± {std:.2f}" if known else "n/a")
        print(f"| {name} | " + " | ".join(cells) + " |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
