"""Where two policies choose differently, on the first one's own fill trajectory; prints text.

    python bench/choice_diff.py MIX SEED [LEAD] [--bands 0-30]

At every task of the fill experiment (same shuffle, inflation and node order as `run_fill`) both
policies plan on the state LEAD's placements made; the disagreements are counted per 10% band
of arrived load and task kind, and, in the chosen bands, by the state of the two chosen nodes
(model/cards, idle cards, free cores rounded down to 8). With LEAD `gpupool` (the default), each
disagreement in the chosen bands is also taken apart into the terms of gpupool's score — FGD's
measure, the capacity measure, the model reserve and the host reserve — as the mean of (gpupool's
node − the other's node) per task kind and node class (model/cards/cores): the term with the
largest difference is what sent gpupool there.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from gpupool.domain.requests import Request
from gpupool.placement.capacity import CapacityModel
from gpupool.placement.context import PlanContext
from gpupool.placement.filters import feasibility
from gpupool.placement.fragmentation import FragmentationModel
from gpupool.placement.planner import Planner
from gpupool.placement.policies.accepting import AcceptingMeasure
from gpupool.placement.policies.fgd import FragCache
from gpupool.placement.policies.gpupool import GpupoolPolicy
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.fill import FillConfig, prepare
from gpupool.simulator.openb import load_nodes, load_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mixes import MIXES

TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"


def state(snap: ClusterSnapshot, i: int) -> str:
    idle = int(snap.fully_free()[i].sum())
    model = snap.model_names[int(snap.model_id[i, 0])]
    return f"{model}/{int(snap.gpu_count[i])} idle{idle} cpu{int(snap.cpu_free[i]) // 8000 * 8}"


def node_class(snap: ClusterSnapshot, i: int) -> str:
    node = snap.nodes[i]
    model = node.gpus[0].model if node.gpus else "cpu"
    return f"{model}/{node.gpu_count}/{node.cpu_milli // 1000}c"


class Terms:
    """gpupool's score terms for two candidate nodes, on the fill's own snapshot."""

    def __init__(self, snap: ClusterSnapshot, workload: TargetWorkload, policy: GpupoolPolicy):
        self.fgd = FragCache(snap, AcceptingMeasure(snap, workload, FragmentationModel))
        self.capacity = FragCache(snap, AcceptingMeasure(snap, workload, CapacityModel))
        self.policy = policy
        self.sums: dict[tuple[str, str, str], np.ndarray] = {}
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def add(self, snap: ClusterSnapshot, r: Request, mine: int, theirs: int) -> None:
        ctx = PlanContext(snap, r, feasibility(snap, r), np.array([mine, theirs]))
        parts = (
            self.fgd.delta(ctx),
            self.capacity.delta(ctx),
            -self.policy.reserve.cost(ctx),
            -self.policy.hosts(snap).cost(ctx),
        )
        key = (kind(r), node_class(snap, mine), node_class(snap, theirs))
        diff = np.array([float(v[0] - v[1]) for v in parts])
        self.sums[key] = self.sums.get(key, np.zeros(4)) + diff
        self.counts[key] += 1

    def report(self, lead: str, other: str) -> None:
        print(
            f"mean ({lead}'s node - {other}'s node) of gpupool's score terms "
            "[fgd measure, capacity measure, -model reserve, -host reserve] (milli-GPU):"
        )
        for key, n in self.counts.most_common(15):
            print(n, key, np.round(self.sums[key] / n, 1).tolist())


def kind(r: Request) -> str:
    return "cpu" if not r.wants_gpu else ("share" if not r.whole_cards else str(r.gpu_count))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mix")
    parser.add_argument("seed", type=int)
    parser.add_argument("lead", nargs="?", default="gpupool")
    parser.add_argument("--bands", default="0-30", help="LOW-HIGH, %% of arrived load")
    ns = parser.parse_args()
    low, high = (int(x) for x in ns.bands.split("-"))
    mix, seed, lead = ns.mix, ns.seed, ns.lead
    other = "fgd" if lead == "gpupool" else "gpupool"
    nodes = load_nodes(TRACE / "openb_node_list_gpu_node.csv")
    base = [p.request for p in load_pods(TRACE / "openb_pod_list_default.csv")]
    reqs = MIXES[mix](base, nodes) if mix in MIXES else base
    cfg = FillConfig(seed=seed)
    snap, tasks, loads, rng = prepare(nodes, reqs, cfg)
    workload = TargetWorkload.from_requests(reqs, cutoff=cfg.popularity_cutoff)
    rank = rng.permutation(len(snap))
    mine, theirs = Planner(lead, workload, rank=rank), Planner(other, workload, rank=rank)
    capacity, arrived = snap.total_gpu_milli(), 0
    by_band: Counter[tuple[int, str]] = Counter()
    by_state: Counter[tuple[str, str, str]] = Counter()
    policy = mine.policy
    terms = Terms(snap, workload, policy) if isinstance(policy, GpupoolPolicy) else None
    for r, load in zip(tasks, loads, strict=True):
        arrived += load
        band = int(10 * arrived / capacity) * 10
        a, b = mine.plan(snap, r), theirs.plan(snap, r)
        if not isinstance(a, Decision):
            continue
        if isinstance(b, Decision) and b.node_index != a.node_index and band <= 100:
            by_band[(band, kind(r))] += 1
            if low <= band <= high:
                by_state[(kind(r), state(snap, a.node_index), state(snap, b.node_index))] += 1
                if terms is not None:
                    terms.add(snap, r, a.node_index, b.node_index)
        snap.assume(a)
    print(f"disagreements by (band, kind): {sorted(by_band.items())}")
    print(f"in bands {low}-{high}: count (kind, {lead}'s node, {other}'s node)")
    for key, n in by_state.most_common(25):
        print(n, key)
    if terms is not None:
        terms.report(lead, other)
    return 0


if __name__ == "__main__":
    sys.exit(main())
