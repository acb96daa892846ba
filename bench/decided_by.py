"""Which kinds of task make the difference between gpupool and FGD on a mix; prints JSON.

    python bench/decided_by.py MIX [--kinds share,1,2+,cpu] [--seeds 42-51] [--jobs 2]

For each set of kinds in `--kinds` (`share`, `1`, `2`, `4`, `8`, `2+` for every multi-GPU
kind, `cpu`; `+`-free sets joined with `/`, e.g. `share/cpu`), a mixed policy places the tasks
of those kinds as gpupool would and every other task as FGD would, on the same fill (seed,
shuffle, node order); the paired difference (mixed - fgd) per seed says how much of gpupool's
gain or loss on the mix those decisions carry. FGD and gpupool themselves are run too, so the
three columns are paired. A mix is any name `bench/heldout_mixes.py` takes.

    python bench/decided_by.py MIX --kinds "" --until 0.3,0.6

`--until X` asks *when* instead of *which*: the fill is split at the moment the cluster's
allocated fraction passes X, once with FGD placing every task until then and gpupool after,
once the other way round (`fgd<X`, `gpupool<X`), each paired with FGD.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpupool.cli.simulate import parse_seeds
from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray
from gpupool.placement.policies.fgd import FgdPolicy
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.workload import TargetWorkload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from choice_diff import kind
from heldout_mixes import DEFAULT_TRACE, fill_figures, paired_runs

KINDS = ("cpu", "share", "1", "2", "4", "8")


def parse_kinds(text: str) -> list[frozenset[str]]:
    sets = []
    for part in filter(None, text.split(",")):
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


class SplitPolicy(GpupoolPolicy):
    """gpupool's score where `by_gpupool` says so, FGD's (with its own cache) elsewhere."""

    def __init__(self, workload: TargetWorkload) -> None:
        super().__init__(workload)
        self.fgd = FgdPolicy(workload)

    def by_gpupool(self, ctx: PlanContext) -> bool:
        raise NotImplementedError

    def score(self, ctx: PlanContext) -> FloatArray:
        return super().score(ctx) if self.by_gpupool(ctx) else self.fgd.score(ctx)


class MixedPolicy(SplitPolicy):
    """gpupool places the tasks of `kinds`, FGD the others."""

    name = "gpupool-for"

    def __init__(self, workload: TargetWorkload, kinds: frozenset[str]) -> None:
        super().__init__(workload)
        self.kinds = kinds

    def by_gpupool(self, ctx: PlanContext) -> bool:
        return kind(ctx.req) in self.kinds


class PhasedPolicy(SplitPolicy):
    """`first` ("fgd" or "gpupool") places every task until the cluster's allocated fraction
    passes `until`, the other one after."""

    name = "phased"

    def __init__(self, workload: TargetWorkload, first: str, until: float) -> None:
        super().__init__(workload)
        self.first, self.until = first, until

    def by_gpupool(self, ctx: PlanContext) -> bool:
        snap = ctx.snap
        early = snap.allocated_gpu_milli() <= self.until * snap.total_gpu_milli()
        return early == (self.first == "gpupool")


def phase(who: str) -> tuple[str, float] | None:
    """`fgd<0.3` -> ("fgd", 0.3); None for a policy name or a set of kinds."""
    if "<" not in who:
        return None
    first, until = who.split("<")
    return first, float(until)


def one(job: tuple[Path, str, str, int]) -> tuple[float, float]:
    trace, who, mix, seed = job
    if who in ("fgd", "gpupool"):
        return fill_figures(trace, mix, seed, who)
    split = phase(who)
    if split:
        return fill_figures(trace, mix, seed, lambda workload: PhasedPolicy(workload, *split))
    kinds = frozenset(who.split("/"))
    return fill_figures(trace, mix, seed, lambda workload: MixedPolicy(workload, kinds))


def label(who: str) -> str:
    split = phase(who)
    if who == "gpupool":
        return who
    if split:
        first, until = split
        then = "gpupool" if first == "fgd" else "fgd"
        return f"{first} until {until:.0%} allocated, {then} after"
    return f"gpupool for {who}, fgd for the rest"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mix")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--kinds", default="share,1,2+,cpu")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--until", default="", help="allocated fractions to split at, e.g. 0.3,0.6")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    mixed = ["/".join(sorted(k)) for k in parse_kinds(args.kinds)]
    try:
        splits = [float(x) for x in filter(None, args.until.split(","))]
    except ValueError:
        parser.error(f"--until takes fractions such as 0.3,0.6, not {args.until!r}")
    if any(not 0 < x < 1 for x in splits):
        parser.error("--until fractions must lie strictly between 0 and 1")
    phased = [f"{first}<{x}" for x in splits for first in ("fgd", "gpupool")]
    out = paired_runs(
        one, args.trace, args.mix, ["gpupool", *mixed, *phased], seeds, args.jobs, label
    )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
