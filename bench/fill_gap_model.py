"""Why the live fill left more GPUs unallocated than the simulator: the live path's choices
modelled over the simulator's own planner, on the Alibaba trace; prints JSON.

    .venv/bin/python bench/fill_gap_model.py [--nodes-file NODES.csv] [--pods-file PODS.csv]
        [--seed 0] [--only NAME ...] [--lags 2 4 8] [--shuffles 8] [--shuffle-seeds 1 2 3]
        [--out bench/results/fill_gap_model.json]

Each variant places the pod list in its order on the node list (a plain fill, nothing departs,
as `live_replay.py` does) with the `gpupool` policy, and differs only in who picks the node
among those the planner scores:

- `simulator`: the planner's best, the first node by name among equal scores (`gpupool
  simulate`);
- `random_ties`: a random node among the planner's equal best scores;
- `cpu_pods_by_kube_scheduler`: GPU pods as `simulator`; pods that ask for no GPU placed by
  kube-scheduler's own scores (`FirstFitByDevicePolicy.node_points`: LeastAllocated plus
  BalancedAllocation over cpu and memory, a random node among equal sums);
- `subset_40pct`: GPU pods as `simulator` but among the first 40 % of the nodes that fit, from a
  rotating start (kube-scheduler's percentageOfNodesToScore at this size), pods without GPU too;
- `extender_before`: what the live path did before: extender weight 1 with every best node at 10
  (scores scaled linearly onto 0..10) added to kube-scheduler's scores, a random node among equal
  sums, 40 % of the nodes scored, pods without GPU placed by kube-scheduler alone;
- `extender_now`: what it does now: weight 5, `/prioritize`'s `pick_scores` and
  `/prioritize-cpu`'s `cpu_pod_scores` (the functions the extender runs) added to
  kube-scheduler's scores, every node scored; the extender does not see a node's CPU (its cache
  has no pods), so its planner runs over nodes without CPU or memory, as live;
- `extender_now_lagN` (one per `--lags` value): `extender_now` with the extender's view N GPU
  pods behind (live, kube-scheduler's next scheduling cycle can reach /prioritize before the
  last pod's /bind reserved its slices there); the node is still picked among those where the
  pod really fits.
- `simulator_shuffledW_sS` (one per `--shuffles` value W and `--shuffle-seeds` seed S): the
  simulator's choices with the pods' order shuffled within consecutive windows of W pods: the
  live order is the trace's only up to such local swaps (pods are created `in_flight` at a time,
  admitted in batches, and kube-scheduler takes equal-priority pods by when they entered its
  queue), so this says how much the result moves with the order alone.

The model is not the live system (no admission window, no timing); `live_replay.py` measures
that. It says which choice costs what.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live_replay as lr
from emit import emit
from live_replay_core import unallocated_gpu_pct

from gpupool.adapters.extender_http.prioritize import cpu_pod_scores, pick_scores
from gpupool.domain.devices import Node
from gpupool.domain.requests import Request
from gpupool.placement.context import PlanContext
from gpupool.placement.default_workload import default_workload
from gpupool.placement.planner import Planner, first_best
from gpupool.placement.policies.first_fit import FirstFitByDevicePolicy
from gpupool.placement.snapshot import ClusterSnapshot

SUBSET = 0.403  # kube-scheduler's adaptive percentage at 1,213 nodes: 50 - 1213/125
MIN_FEASIBLE = 100  # ... never fewer nodes than this


class Fill:
    """One variant's fill: the real snapshot (what nodes hold), the extender's CPU-blind view,
    kube-scheduler's scores, the rotating start of its node subset."""

    def __init__(self, nodes: list[Node], seed: int) -> None:
        self.snap = ClusterSnapshot(nodes)
        self.blind = ClusterSnapshot([replace(n, cpu_milli=0, memory_mib=0) for n in nodes])
        self.planner = Planner("gpupool", default_workload())
        # the extender's own planner (a planner keeps per-snapshot state: one per snapshot)
        self.blind_planner = Planner("gpupool", default_workload())
        self.kube = FirstFitByDevicePolicy(seed)
        self.rng = np.random.default_rng(seed)
        self.start = 0
        self.placed: list[Request] = []

    def subset(self, rows: np.ndarray) -> np.ndarray:
        n = len(self.snap)
        k = max(MIN_FEASIBLE, int(n * SUBSET))
        if len(rows) <= k:
            return rows
        order = np.argsort((rows - self.start) % n)[:k]
        self.start = (int(rows[order[-1]]) + 1) % n
        return np.sort(rows[order])

    def kube_points(self, req: Request, feas: object, rows: np.ndarray) -> np.ndarray:
        return self.kube.node_points(PlanContext(self.snap, req, feas, rows)).astype(float)  # type: ignore[arg-type]

    def pick_max(self, total: np.ndarray) -> int:
        tied = np.flatnonzero(total == total.max())
        return int(tied[self.rng.integers(len(tied))])

    def place(self, req: Request, row: int) -> None:
        feas, _, _ = self.planner.scores(self.snap, req)
        self.snap.assume(self.planner.decide(self.snap, req, feas, row, 0.0))
        self.placed.append(req)


Choose = Callable[[Fill, Request, object, np.ndarray, np.ndarray], int]


def simulator(f: Fill, req: Request, feas: object, rows: np.ndarray, scores: np.ndarray) -> int:
    return int(rows[first_best(scores, rows)])


def random_ties(f: Fill, req: Request, feas: object, rows: np.ndarray, scores: np.ndarray) -> int:
    tied = np.flatnonzero(scores == scores.max())
    return int(rows[tied[f.rng.integers(len(tied))]])


def cpu_pods_by_kube_scheduler(
    f: Fill, req: Request, feas: object, rows: np.ndarray, scores: np.ndarray
) -> int:
    if req.wants_gpu:
        return simulator(f, req, feas, rows, scores)
    return int(rows[f.pick_max(f.kube_points(req, feas, rows))])


def subset_40pct(f: Fill, req: Request, feas: object, rows: np.ndarray, scores: np.ndarray) -> int:
    keep = np.isin(rows, f.subset(rows))
    return simulator(f, req, feas, rows[keep], scores[keep])


def _old_scale(values: np.ndarray) -> np.ndarray:
    """The extender's scores before: linear onto 0..10, every best node 10."""
    lo, hi = float(values.min()), float(values.max())
    return np.rint(10 * (values - lo) / (hi - lo)) if hi > lo else np.full(len(values), 10.0)


def extender_before(
    f: Fill, req: Request, feas: object, rows: np.ndarray, scores: np.ndarray
) -> int:
    keep = np.isin(rows, f.subset(rows))
    rows, scores = rows[keep], scores[keep]
    total = f.kube_points(req, feas, rows)
    if req.wants_gpu:
        total = total + _old_scale(scores) * 1 * 10
    return int(rows[f.pick_max(total)])


def extender_now(f: Fill, req: Request, feas: object, rows: np.ndarray, scores: np.ndarray) -> int:
    weight = 5
    if req.wants_gpu:
        # the extender plans over its CPU-blind view; kube-scheduler's filter has kept the
        # nodes where CPU and memory fit (`rows`)
        blind_req = replace(req, cpu_milli=0, memory_mib=0)
        _, brows, bscores = f.blind_planner.scores(f.blind, blind_req)
        by_row = np.full(len(f.snap), np.nan)
        by_row[brows] = bscores
        ext = pick_scores(by_row[rows], rows)
    else:
        ext = cpu_pod_scores(rows)
    return int(rows[f.pick_max(f.kube_points(req, feas, rows) + ext * weight * 10)])


VARIANTS: dict[str, Choose] = {
    "simulator": simulator,
    "random_ties": random_ties,
    "cpu_pods_by_kube_scheduler": cpu_pods_by_kube_scheduler,
    "subset_40pct": subset_40pct,
    "extender_before": extender_before,
    "extender_now": extender_now,
}


def run(
    nodes: list[Node], requests: list[Request], choose: Choose, seed: int, lag: int = 0
) -> dict[str, object]:
    """`lag`: GPU pods placed but not yet in the extender's view (`extender_now`'s) when the
    next is chosen."""
    f = Fill(nodes, seed)
    unseen: deque[tuple[Request, int]] = deque()
    for req in requests:
        feas, rows, scores = f.planner.scores(f.snap, req)
        if len(rows) == 0:
            continue
        row = choose(f, req, feas, rows, scores)
        f.place(req, row)
        if req.wants_gpu and choose is extender_now:
            unseen.append((replace(req, cpu_milli=0, memory_mib=0), row))
        while len(unseen) > lag:
            blind_req, at = unseen.popleft()
            bfeas, _, _ = f.blind_planner.scores(f.blind, blind_req)
            f.blind.assume(f.blind_planner.decide(f.blind, blind_req, bfeas, at, 0.0))
    return {
        "placed": len(f.placed),
        "unallocated_gpu_pct": round(unallocated_gpu_pct(nodes, f.placed), 3),
    }


def shuffled(requests: list[Request], window: int, seed: int) -> list[Request]:
    """`requests` with each consecutive `window` of them in a random order (seeded)."""
    rng = np.random.default_rng(seed)
    out: list[Request] = []
    for start in range(0, len(requests), window):
        block = requests[start : start + window]
        out += [block[i] for i in rng.permutation(len(block))]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    lr.add_trace_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), default=None)
    parser.add_argument(
        "--lags",
        nargs="*",
        type=int,
        default=[2, 4, 8],
        help="extender_now's view this many GPU pods behind, one run each (with extender_now)",
    )
    parser.add_argument(
        "--shuffles",
        nargs="*",
        type=int,
        default=[],
        help="the simulator over the pods shuffled within windows of this many, one run each",
    )
    parser.add_argument("--shuffle-seeds", nargs="*", type=int, default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    nodes, requests = lr.replay_inputs(args.nodes_file, args.pods_file)
    result: dict[str, object] = {
        "benchmark": "fill gap model (the live path's choices over the simulator's planner)",
        "nodes_file": args.nodes_file.name,
        "pods_file": args.pods_file.name,
        "nodes": len(nodes),
        "pods": len(requests),
        "seed": args.seed,
    }
    variants: dict[str, object] = {}
    result["variants"] = variants
    names = args.only or list(VARIANTS)
    runs = [(name, 0) for name in names]
    if "extender_now" in names:  # the lag is that of the extender's view
        runs += [("extender_now", lag) for lag in args.lags]
    for name, lag in runs:
        label = f"{name}_lag{lag}" if lag else name
        variants[label] = run(nodes, requests, VARIANTS[name], args.seed, lag)
        print(label, variants[label], file=sys.stderr, flush=True)
    for window in args.shuffles:
        for seed in args.shuffle_seeds:
            label = f"simulator_shuffled{window}_s{seed}"
            order = shuffled(requests, window, seed)
            variants[label] = run(nodes, order, simulator, args.seed)
            print(label, variants[label], file=sys.stderr, flush=True)
    emit(result, args.out, indent=1)


if __name__ == "__main__":
    main()
