"""The yardstick: FGD's `fill` experiment written straight in numpy, independent of gpupool's code.

    python bench/numpy_fill.py [--trace DIR] [--pods default] [--seeds 42-44]

The same experiment as `gpupool simulate fill --policy fgd` on the `openb` CSVs (same seeds, same
draws, same pod and node lists): shuffle, clone random tasks up to 130% of the GPU capacity (or
drop random GPU tasks), a random fixed node order for ties; then each task once, on the node
whose FGD score — the sigmoid of the fall in the target workload's fragmentation, x100,
truncated — is highest, the slice on the best-fitting card, whole cards the lowest free ones.
It reads nothing of gpupool but the CSV files, so it checks gpupool's `fgd` (the test
tests/unit/simulator/test_numpy_fill_yardstick.py compares them seed by seed) and times it:
bench/fill_bench.py divides each policy's seconds by this one's in the same run.

What it models is what the trace needs: per node CPU and memory; per card the free share in
milli (a share request takes its milli, a whole card 1000) and at most 10 pods per card (the
snapshot's share count). The cluster's state is a few arrays; the fragmentation of a node is
kept per node, and the fragmentation after placing a task shape on a node is memoised per
shape until that node changes: the obvious caching, nothing more.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MILLI = 1000
PODS_PER_CARD = 10
NEVER = 1 << 40
DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/alibaba-gpu-v2023"


@dataclass(frozen=True, slots=True)
class Task:
    cpu: int
    mem: int
    count: int  # GPUs; 0 for CPU-only
    milli: int  # per GPU; 1000 for whole cards
    models: tuple[str, ...]

    @property
    def load(self) -> int:
        return self.count * self.milli


@dataclass(slots=True)
class Cluster:
    cpu: np.ndarray  # (N,) free milli-CPU
    mem: np.ndarray  # (N,) free MiB
    share: np.ndarray  # (N, G) free milli per card; 0 where no card
    pods: np.ndarray  # (N, G) pods a card may still take
    present: np.ndarray  # (N, G)
    model: list[list[str]]  # per node, per card
    models: list[str] = field(default_factory=list)


def read_nodes(path: Path) -> Cluster:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    n = len(rows)
    g = max(int(r["gpu"]) for r in rows) or 1
    present = np.zeros((n, g), dtype=bool)
    for i, r in enumerate(rows):
        present[i, : int(r["gpu"])] = True
    return Cluster(
        cpu=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        mem=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        share=np.where(present, MILLI, 0).astype(np.int64),
        pods=np.where(present, PODS_PER_CARD, 0).astype(np.int64),
        present=present,
        model=[[r["model"]] * int(r["gpu"]) for r in rows],
    )


def read_tasks(path: Path) -> list[Task]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    tasks = []
    for r in rows:
        count = int(r["num_gpu"])
        spec = (r.get("gpu_spec") or "") if count else ""
        tasks.append(
            Task(
                cpu=int(r["cpu_milli"]),
                mem=int(r["memory_mib"]),
                count=count,
                milli=int(r["gpu_milli"]) if count else 0,
                models=tuple(dict.fromkeys(m for m in spec.replace(",", "|").split("|") if m)),
            )
        )
    return tasks


def inflate(tasks: list[Task], capacity: int, rng: np.random.Generator) -> list[Task]:
    """Shuffle; clone random tasks up to 130% of capacity; drop random GPU tasks past it."""
    order = [int(i) for i in rng.permutation(len(tasks))]
    target = 1.3 * capacity
    total = sum(t.load for t in tasks)
    while total < target:
        src = int(rng.integers(len(tasks)))
        order.append(src)
        total += tasks[src].load
    while total > target:
        pos = int(rng.integers(len(order)))
        if tasks[order[pos]].load == 0:
            continue
        total -= tasks[order.pop(pos)].load
    return [tasks[i] for i in order]


def target_workload(tasks: list[Task]) -> list[tuple[tuple[int, int, int, tuple[str, ...]], int]]:
    """Task shapes (cpu, milli, count, models) up to 95% popularity, with their counts."""
    shapes = Counter((t.cpu, t.milli, t.count, t.models) for t in tasks)
    # most frequent first; ties in the order (cpu, milli, count, 0, 0, models)
    ordered = sorted(
        shapes.items(), key=lambda kv: (-kv[1], (kv[0][0], kv[0][1], kv[0][2], kv[0][3]))
    )
    kept, running = [], 0
    for shape, count in ordered:
        kept.append((shape, count))
        running += count
        if running >= 0.95 * len(tasks):
            break
    return kept


class Fragmentation:
    """FGD's node fragmentation against the target workload, for all GPU shapes at once."""

    def __init__(self, cluster: Cluster, workload: list[tuple[tuple, int]]) -> None:
        self.population = sum(n for _, n in workload)
        self.cpu_only = sum(n for (_, _, count, _), n in workload if count == 0)
        gpu = [(s, n) for s, n in workload if s[2] > 0]
        self.cpu_need = np.array([s[0] for s, _ in gpu], dtype=np.int64)  # (S,)
        self.count = np.array([s[2] for s, _ in gpu], dtype=np.int64)
        self.count_weight = np.array([n for _, n in gpu], dtype=np.int64)
        thr = np.full((len(gpu), *cluster.share.shape), NEVER, dtype=np.int64)  # (S, N, G)
        for k, ((_, milli, _, models), _) in enumerate(gpu):
            ok = cluster.present & accepts(cluster, models)
            thr[k][ok] = milli
        self.thr = thr

    def of(self, rows: np.ndarray, cpu: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Fragmentation of nodes `rows` with free `cpu` (B,) and `share` (B, G)."""
        total = share.sum(axis=1)
        if not len(self.count_weight):
            return self.cpu_only * total / self.population
        ok = share[None] >= self.thr[:, rows]  # (S, B, G)
        hostable = (ok.sum(axis=2) >= self.count[:, None]) & (cpu[None] >= self.cpu_need[:, None])
        partial = np.where(ok, 0, share[None]).sum(axis=2)  # (S, B)
        frag = np.where(hostable, partial, total[None])
        # in whole counts, exactly (float weights would round differently for different batch
        # sizes, and the score's truncation would see it); one division at the end
        return (self.cpu_only * total + self.count_weight @ frag) / self.population


def accepts(cluster: Cluster, models: tuple[str, ...]) -> np.ndarray:
    if not models:
        return cluster.present
    return np.array(
        [
            [m in models for m in row] + [False] * (cluster.share.shape[1] - len(row))
            for row in cluster.model
        ],
        dtype=bool,
    )


@dataclass(slots=True)
class Run:
    seed: int
    tasks: int
    placed: int = 0
    failed: int = 0
    unallocated_gpu_pct: dict[int, float] = field(default_factory=dict)
    frag_rate_pct: dict[int, float] = field(default_factory=dict)
    frag_amount_pct: dict[int, float] = field(default_factory=dict)


def fill(nodes_csv: Path, pods_csv: Path, seed: int, log: list | None = None) -> Run:
    """One seed; `log`, when given, gets each task's (node, cards) or None."""
    cluster = read_nodes(nodes_csv)
    pod_list = read_tasks(pods_csv)
    n = len(cluster.cpu)
    capacity = int(cluster.present.sum()) * MILLI
    rng = np.random.default_rng(seed)
    tasks = inflate(pod_list, capacity, rng)
    rank = rng.permutation(n)
    frag = Fragmentation(cluster, target_workload(pod_list))
    everyone = np.arange(n)
    version = np.zeros(n, dtype=np.int64)
    node_frag = frag.of(everyone, cluster.cpu, cluster.share)
    after_memo: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    accepts_memo: dict[tuple[str, ...], np.ndarray] = {}

    run = Run(seed=seed, tasks=len(tasks))
    samples: dict[int, list[tuple[float, float, float]]] = {80: [], 100: [], 130: []}
    curve: list[tuple[float, float]] = []
    arrived = allocated = 0
    last_curve = -1.0
    for step, t in enumerate(tasks, start=1):
        ok = (cluster.cpu >= t.cpu) & (cluster.mem >= t.mem)
        if t.count:
            if t.models not in accepts_memo:
                accepts_memo[t.models] = accepts(cluster, t.models)
            need = MILLI if t.milli == MILLI else t.milli
            fit = accepts_memo[t.models] & (cluster.share >= need) & (cluster.pods > 0)
            ok &= fit.sum(axis=1) >= t.count
        rows = np.flatnonzero(ok)
        if len(rows):
            key = (t.cpu, t.milli, t.count, t.models)
            if key not in after_memo:
                after_memo[key] = (np.zeros(n), np.full(n, -1, dtype=np.int64))
            after, seen = after_memo[key]
            stale = rows[seen[rows] != version[rows]]
            if len(stale):
                share = cluster.share[stale].copy()
                if t.count:
                    cards = choose(fit[stale], cluster.share[stale], t)
                    b = np.arange(len(stale))[:, None]
                    share[b, cards] -= t.milli
                after[stale] = frag.of(stale, cluster.cpu[stale] - t.cpu, share)
                seen[stale] = version[stale]
            delta = node_frag[rows] - after[rows]
            score = np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
            tied = rows[score == score.max()]
            i = int(tied[np.argmin(rank[tied])])
            cluster.cpu[i] -= t.cpu
            cluster.mem[i] -= t.mem
            if t.count:
                cards = choose(fit[i : i + 1], cluster.share[i : i + 1], t)[0]
                cluster.share[i, cards] -= t.milli
                cluster.pods[i, cards] -= 1
            version[i] = step
            node_frag[i] = frag.of(np.array([i]), cluster.cpu[i : i + 1], cluster.share[i : i + 1])[
                0
            ]
            allocated += t.load
            run.placed += 1
            if log is not None:
                log.append((i, tuple(int(c) for c in cards) if t.count else ()))
        else:
            run.failed += 1
            if log is not None:
                log.append(None)
        arrived += t.load
        arrived_pct = 100.0 * arrived / capacity
        alloc_pct = 100.0 * allocated / capacity
        point = math.floor(arrived_pct + 0.5)
        if point in samples:
            idle = int(cluster.share.sum())
            total_frag = float(node_frag.sum())
            samples[point].append(
                (
                    alloc_pct,
                    100.0 * total_frag / idle if idle else 0.0,
                    100.0 * total_frag / capacity,
                )
            )
        if arrived_pct - last_curve >= 0.5:
            curve.append((arrived_pct, alloc_pct))
            last_curve = arrived_pct
    curve.append((100.0 * arrived / capacity, 100.0 * allocated / capacity))
    for point, values in samples.items():
        if values:
            arr = np.array(values)
            run.unallocated_gpu_pct[point] = 100.0 - float(arr[:, 0].mean())
            run.frag_rate_pct[point] = float(arr[:, 1].mean())
            run.frag_amount_pct[point] = float(arr[:, 2].mean())
        else:  # the load jumped over this percent: interpolate, as gpupool's fill does
            xs, ys = zip(*curve, strict=True)
            run.unallocated_gpu_pct[point] = 100.0 - float(np.interp(point, xs, ys))
            run.frag_rate_pct[point] = math.nan
            run.frag_amount_pct[point] = math.nan
    return run


def choose(fit: np.ndarray, share: np.ndarray, t: Task) -> np.ndarray:
    """(B, k) cards per node: the best-fitting card for a slice (lowest index on ties), else the
    lowest-numbered free cards."""
    if t.milli == MILLI:
        return np.argsort(~fit, axis=1, kind="stable")[:, : t.count]
    return np.argmin(np.where(fit, share, NEVER), axis=1)[:, None]


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--nodes", type=Path, help="node CSV (default: the trace's GPU nodes)")
    parser.add_argument("--pods", default="default", help="pod list name or CSV path")
    parser.add_argument("--seeds", default="42")
    args = parser.parse_args()
    nodes = args.nodes or args.trace / "openb_node_list_gpu_node.csv"
    pods = (
        Path(args.pods)
        if args.pods.endswith(".csv")
        else args.trace / f"openb_pod_list_{args.pods}.csv"
    )
    runs = []
    for seed in seeds_of(args.seeds):
        t0 = time.perf_counter()
        run = fill(nodes, pods, seed)
        runs.append(
            {
                "seed": seed,
                "seconds": round(time.perf_counter() - t0, 3),
                "tasks": run.tasks,
                "placed": run.placed,
                "failed": run.failed,
                **{
                    f"unallocated_gpu_pct_{p}": round(v, 4)
                    for p, v in run.unallocated_gpu_pct.items()
                },
                **{
                    f"frag_rate_pct_{p}": round(v, 4)
                    for p, v in run.frag_rate_pct.items()
                    if p == 80
                },
                **{
                    f"frag_amount_pct_{p}": round(v, 4)
                    for p, v in run.frag_amount_pct.items()
                    if p == 80
                },
            }
        )
    print(
        json.dumps(
            {"bench": "numpy-fill-fgd", "nodes": str(nodes), "pods": str(pods), "runs": runs},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
