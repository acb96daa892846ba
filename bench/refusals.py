"""Which tasks a policy refuses in the fill experiment, on which models, at which load; prints JSON.

    python bench/refusals.py [--trace DIR] [--mix default|multigpu40|gpuspec33|...]
                             [--policies fgd,gpupool] [--seed 42] [--at 70,100,130]

Runs the fill experiment's loop (same shuffle, inflation and node order as `run_fill`) and logs:
- refused tasks per load band (10% of arrived load), by task kind (cpu, share, 1, 2, 4, 8 GPUs),
  by restriction (the accepted models, or `any`), with the planner's most common node reason;
- at each `--at` load: per GPU model, the allocated share of its cards, its whole idle cards and
  idle nodes, and where the GPU placed so far went (restricted vs unrestricted tasks);
- and per node class (model/cards/cores/GiB), where the free GPUs are: free GPUs, whole idle
  cards, and the free cores and GiB beside them (on the nodes with free share), which tells
  cards stranded by CPU or memory from fragments.
Multi-GPU tasks are keyed with their CPU and memory (`8 120c 700Gi any`): those decide which
nodes can host them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from gpupool.domain.requests import MILLI, Request
from gpupool.placement.planner import Planner
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.workload import TargetWorkload
from gpupool.simulator.fill import FillConfig, prepare
from gpupool.simulator.openb import load_nodes, load_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mixes import MIXES

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"


def kind(req: Request) -> str:
    if not req.wants_gpu:
        return "cpu"
    if not req.whole_cards:
        return "share"
    if req.gpu_count == 1:
        return "1"
    return f"{req.gpu_count} {req.cpu_milli // 1000}c {req.memory_mib // 1024}Gi"


def node_classes(snap: ClusterSnapshot) -> dict[str, object]:
    """Per node class, its free GPUs, idle cards, and the cores and GiB free beside them."""
    out: dict[str, dict[str, float]] = {}
    free = snap.share_free.sum(axis=1)
    idle = snap.fully_free().sum(axis=1)
    for i in np.flatnonzero(free > 0):
        model = snap.model_names[int(snap.model_id[i, 0])]
        name = f"{model}/{snap.gpu_count[i]}/{snap.cpu_cap[i] // 1000}c/{snap.mem_cap[i] // 1024}Gi"
        row = out.setdefault(
            name, {"nodes": 0, "free_gpus": 0.0, "idle_cards": 0, "cores": 0, "GiB": 0}
        )
        row["nodes"] += 1
        row["free_gpus"] += round(float(free[i]) / MILLI, 2)
        row["idle_cards"] += int(idle[i])
        row["cores"] += int(snap.cpu_free[i]) // 1000
        row["GiB"] += int(snap.mem_free[i]) // 1024
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["free_gpus"]))


def model_state(snap: ClusterSnapshot, placed: dict[str, Counter[str]]) -> dict[str, object]:
    out: dict[str, object] = {}
    idle = snap.fully_free()
    for m, mid in snap.model_ids.items():
        cards = snap.present & (snap.model_id == mid)
        nodes = cards.any(axis=1)
        total = int(cards.sum())
        free = int(snap.share_free[cards].sum())
        idle_nodes = nodes & (idle.sum(axis=1) == snap.gpu_count)
        out[m] = {
            "cards": total,
            "allocated_pct": round(100.0 * (1 - free / (total * MILLI)), 2),
            "idle_cards": int((idle & cards).sum()),
            "partial_free_gpus": round((free - int((idle & cards).sum()) * MILLI) / MILLI, 1),
            "idle_nodes": int(idle_nodes.sum()),
            "cpu_free_pct_on_nodes_with_free_cards": round(
                100.0
                * float(snap.cpu_free[nodes & (snap.share_free.sum(axis=1) > 0)].sum())
                / max(1, float(snap.cpu_cap[nodes].sum())),
                1,
            ),
            "placed_gpus_by": {k: round(v / MILLI, 1) for k, v in sorted(placed[m].items())},
        }
    return out


def run(nodes_path: Path, requests: list[Request], policy: str, seed: int, at: list[int]) -> dict:
    nodes = load_nodes(nodes_path)
    config = FillConfig(seed=seed)
    snap, tasks, task_load, rng = prepare(nodes, requests, config)
    workload = TargetWorkload.from_requests(requests, cutoff=config.popularity_cutoff)
    planner = Planner(policy, workload, seed=seed, rank=rng.permutation(len(snap)))
    capacity = snap.total_gpu_milli()
    refused: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    placed: dict[str, Counter[str]] = defaultdict(Counter)
    states: dict[int, object] = {}
    arrived = allocated = 0
    pending = sorted(at)
    for req, load in zip(tasks, task_load, strict=True):
        arrived += load
        band = f"{10 * math.floor(10 * arrived / capacity):03d}"
        result = planner.plan(snap, req)
        restricted = "|".join(req.models) or "any"
        if isinstance(result, Decision):
            snap.assume(result)
            allocated += load
            if req.wants_gpu:
                model = snap.model_names[int(snap.model_id[result.node_index, result.cards[0]])]
                placed[model]["restricted" if req.models else "any"] += load
        else:
            key = f"{kind(req)} {restricted}"
            refused[band][key] += 1
            refused[band]["gpu_refused_gpus"] += load // MILLI if load else 0
            if result.reasons:
                reasons[key][result.reasons[0][0]] += 1
        while pending and 100 * arrived >= pending[0] * capacity:
            states[pending.pop(0)] = {
                "allocated_pct": round(100.0 * allocated / capacity, 2),
                "models": model_state(snap, placed),
                "free_by_node_class": node_classes(snap),
            }
    return {
        "refused_by_band": {b: dict(c.most_common(12)) for b, c in sorted(refused.items())},
        "top_reason": {k: dict(c.most_common(2)) for k, c in reasons.items()},
        "at": states,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--mix", default="gpuspec33")
    parser.add_argument("--policies", default="fgd,gpupool")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--at", default="70,100,130")
    args = parser.parse_args()
    nodes_path = args.trace / "openb_node_list_gpu_node.csv"
    base = [p.request for p in load_pods(args.trace / "openb_pod_list_default.csv")]
    if args.mix in MIXES:
        requests = MIXES[args.mix](base, load_nodes(nodes_path))
    else:
        requests = [p.request for p in load_pods(args.trace / f"openb_pod_list_{args.mix}.csv")]
    at = [int(x) for x in args.at.split(",")]
    out = {p: run(nodes_path, requests, p, args.seed, at) for p in args.policies.split(",")}
    print(json.dumps({"mix": args.mix, "seed": args.seed, "policies": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
