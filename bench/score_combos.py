"""Other ways of turning gpupool's two measures into one score, against FGD; prints JSON.

    python bench/score_combos.py MIX [--combos fgd-ties,min,ramp,ramp-fgd-ties] [--seeds 42-51]
                                     [--jobs 2]

gpupool scores a placement by FGD's sigmoid of the mean of two deltas (FGD's one-step measure
and the capacity measure, reserves subtracted), truncated to whole points, ties to the node
order (`placement/policies/gpupool.py`). The combinations here keep both measures and the
reserves and change only how the two deltas make the score:
- `fgd-ties`: gpupool's score; its ties go to the better FGD score (FGD's own truncated
  sigmoid of its delta), and only then to the node order;
- `min`: the worse of the two measures' truncated scores (a placement both must find good);
- `ramp`: the deltas weighted 1 - u and u, u the cluster's allocated fraction of GPU share
  (FGD's measure while the cluster is empty, the capacity measure as it fills);
- `ramp-fgd-ties`: `ramp`, its ties to the better FGD score.
FGD and gpupool run on the same seeds, so every column is paired per seed with FGD (mean, sd,
min, max of combination - fgd, and seeds better / worse). A mix is any name
`bench/heldout_mixes.py` takes. None of these is gpupool's policy: docs/multigpu30c.md says
what each gave and why none was kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gpupool.cli.simulate import parse_seeds
from gpupool.placement.capacity import CapacityModel
from gpupool.placement.context import PlanContext
from gpupool.placement.fragmentation import FloatArray, FragmentationModel
from gpupool.placement.policies.accepting import AcceptingMeasure
from gpupool.placement.policies.fgd import FragCache, points
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.placement.workload import TargetWorkload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout_mixes import DEFAULT_TRACE, fill_figures, paired_runs


def allocated(snap: ClusterSnapshot) -> float:
    return snap.allocated_gpu_milli() / max(snap.total_gpu_milli(), 1)


# each combination: (FGD's delta, the capacity measure's delta, allocated fraction) -> scores;
# a tie-break adds the FGD score / 1000, below one point, so it never overturns the main score
COMBOS: dict[str, Callable[[FloatArray, FloatArray, float], FloatArray]] = {
    "fgd-ties": lambda f, c, u: points((f + c) / 2) + points(f) / 1000,
    "min": lambda f, c, u: np.minimum(points(f), points(c)),
    "ramp": lambda f, c, u: points((1 - u) * f + u * c),
    "ramp-fgd-ties": lambda f, c, u: points((1 - u) * f + u * c) + points(f) / 1000,
}


class ComboPolicy(GpupoolPolicy):
    """gpupool's measures and reserves, scored by one of COMBOS."""

    name = "gpupool-combo"

    def __init__(self, workload: TargetWorkload, combo: str) -> None:
        super().__init__(workload)
        self.combo = COMBOS[combo]
        self._pair: tuple[FragCache, FragCache] | None = None

    def pair(self, snap: ClusterSnapshot) -> tuple[FragCache, FragCache]:
        if self._pair is None or self._pair[0].uid != snap.uid:
            self._pair = (
                FragCache(snap, AcceptingMeasure(snap, self.workload, FragmentationModel)),
                FragCache(snap, AcceptingMeasure(snap, self.workload, CapacityModel)),
            )
        return self._pair

    def score(self, ctx: PlanContext) -> FloatArray:
        frag, capacity = self.pair(ctx.snap)
        costs = self.reserve.cost(ctx) + self.hosts(ctx.snap).cost(ctx)
        return self.combo(frag.delta(ctx) - costs, capacity.delta(ctx) - costs, allocated(ctx.snap))


def one(job: tuple[Path, str, str, int]) -> tuple[float, float]:
    trace, who, mix, seed = job
    if who in ("fgd", "gpupool"):
        return fill_figures(trace, mix, seed, who)
    return fill_figures(trace, mix, seed, lambda workload: ComboPolicy(workload, who))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mix")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--combos", default=",".join(COMBOS))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    combos = [c for c in args.combos.split(",") if c]
    unknown = [c for c in combos if c not in COMBOS]
    if unknown:
        parser.error(f"unknown combination {unknown[0]!r}; choose from {', '.join(COMBOS)}")
    out = paired_runs(one, args.trace, args.mix, ["gpupool", *combos], seeds, args.jobs)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
