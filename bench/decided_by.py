"""Which kinds of task make the difference between gpupool and FGD on a mix; prints JSON.

    python bench/decided_by.py MIX [--kinds share,1,2+,cpu] [--seeds 42-51] [--jobs 2]

For each set of kinds in `--kinds` (`share`, `1`, `2`, `4`, `8`, `2+` for every multi-GPU
kind, `cpu`; `+`-free sets joined with `/`, e.g. `share/cpu`), a mixed policy places the tasks
of those kinds as gpupool would and every other task as FGD would, on the same fill (seed,
shuffle, node order); the paired difference (mixed - fgd) per seed says how much of gpupool's
gain or loss on the mix those decisions carry. FGD and gpupool themselves are run too, so the
three columns are paired. A mix is any name `bench/heldout_mixes.py` takes.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from gpupool.cli.simulate import parse_seeds
from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray
from gpupool.placement.policies.fgd import FgdPolicy
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.fill import FillConfig, run_fill

sys.path.insert(0, str(Path(__file__).resolve().parent))
from choice_diff import kind
from heldout_mixes import DEFAULT_TRACE, inputs, stats

KINDS = ("cpu", "share", "1", "2", "4", "8")


def parse_kinds(text: str) -> list[frozenset[str]]:
    sets = []
    for part in text.split(","):
        names: set[str] = set()
        for name in part.split("/"):
            if name == "2+":
                names |= {"2", "4", "8"}
            elif name in KINDS:
                names.add(name)
            else:
                raise SystemExit(f"unknown task kind {name!r}; use {', '.join(KINDS)} or 2+")
        sets.append(frozenset(names))
    return sets


class MixedPolicy(GpupoolPolicy):
    """gpupool's scores for the tasks of `kinds`, FGD's (with its own cache) for the others."""

    name = "gpupool-for"

    def __init__(self, workload: TargetWorkload, kinds: frozenset[str]) -> None:
        super().__init__(workload)
        self.kinds = kinds
        self.fgd = FgdPolicy(workload)

    def score(self, ctx: PlanContext) -> FloatArray:
        return super().score(ctx) if kind(ctx.req) in self.kinds else self.fgd.score(ctx)


def one(job: tuple[Path, str, str, int]) -> tuple[float, float]:
    trace, who, mix, seed = job
    nodes, requests = inputs(trace, mix)
    config = FillConfig(seed=seed)
    if who in ("fgd", "gpupool"):
        run = run_fill(nodes, requests, who, config)
    else:
        workload = TargetWorkload.from_requests(requests, cutoff=config.popularity_cutoff)
        run = run_fill(nodes, requests, MixedPolicy(workload, frozenset(who.split("/"))), config)
    return run.unallocated_gpu_pct[100], run.unallocated_gpu_pct[130]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mix")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--kinds", default="share,1,2+,cpu")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    mixed = ["/".join(sorted(k)) for k in parse_kinds(args.kinds)]
    who = ["fgd", "gpupool", *mixed]
    jobs = [(args.trace, w, args.mix, s) for w in who for s in seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        got = dict(zip(jobs, pool.map(one, jobs), strict=True))
    out: dict[str, object] = {"mix": args.mix, "seeds": seeds}
    for at, k in (("100", 0), ("130", 1)):
        fgd = np.array([got[(args.trace, "fgd", args.mix, s)][k] for s in seeds])
        table: dict[str, object] = {"fgd": stats(fgd)}
        for w in who[1:]:
            v = np.array([got[(args.trace, w, args.mix, s)][k] for s in seeds])
            d = v - fgd
            label = w if w == "gpupool" else f"gpupool for {w}, fgd for the rest"
            table[label] = {
                **stats(v),
                "minus_fgd": stats(d),
                "minus_fgd_per_seed": [round(float(x), 3) for x in d],
                "seeds_better_worse": [int((d < -1e-9).sum()), int((d > 1e-9).sum())],
            }
        out[f"unallocated_gpu_pct_{at}"] = table
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
