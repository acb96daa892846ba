"""The admission round owed one pod change, at several cluster sizes: what it costs beyond its
writes, with what the controller keeps between rounds (`kept`: the pods' borrowed marks,
`admission.charge.KeptMarks`, and the leases' core leases for the budget meter,
`budget.plan.KeptAccounts`) and with both made afresh each round (`afresh`, as before), side
by side in one process; prints JSON.

    .venv/bin/python bench/admission_rounds.py [--pods 1000 7500 20000] [--nodes 1213]
        [--rounds 30] [--out bench/results/NAME.json]

The cluster is lease_rounds.py's (bench/web_model.py's generated pool at rest: every lease
Active, every pod admitted and Running, twelve tenants' GpuQuotas), in the controller's watch
cache fed by hand and read through its own adapter. The client takes the writes: a GpuQuota
status it is sent is folded back into the cache, as the watch would bring it, so from the
second round on a round at rest writes nothing (the JSON counts the writes of the measured
rounds: 0 expected). Each round a random pod's annotation changes, then each variant's
reconciler runs a round; the admission round still decides over every tenant's pods, so this
is its cost per change in a fill.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any, cast

from lease_rounds import cluster, fed_cache, touch
from web_model import Feeder

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.controllers.admission.charge import mark_borrowed
from gpupool.controllers.admission.reconcile import AdmissionReconciler

NOW = 1_800_000_000.0
VARIANTS = ("kept", "afresh")


class StatusClient:
    """Takes the admission round's writes: a GpuQuota status is folded into the cache."""

    def __init__(self, feeder: Feeder, quotas: dict[str, dict[str, Any]]) -> None:
        self.feeder = feeder
        self.quotas = quotas
        self.writes = 0

    async def patch(self, res: Any, name: str, obj: Any, **_: Any) -> None:
        self.writes += 1
        quota = self.quotas.get(name)
        if quota is not None and isinstance(obj, dict) and "status" in obj:
            quota["status"] = {**quota.get("status", {}), **obj["status"]}
            self.feeder.write("gpuquotas", quota)

    async def create(self, obj: Any, **_: Any) -> None:
        self.writes += 1


async def size(nodes: int, pods: int, rounds: int, seed: int) -> dict[str, Any]:
    objs = cluster(nodes, pods)
    cache, feeder = fed_cache(objs)
    client = StatusClient(feeder, {q["metadata"]["name"]: q for q in objs["gpuquotas"]})
    api = KubeClusterApi(cast(Any, client), cache=cache)
    loops = {way: AdmissionReconciler(api, lambda: NOW) for way in VARIANTS}
    afresh = cast(Any, loops["afresh"])  # as before KeptMarks and KeptAccounts
    afresh._marks, afresh._accounts = mark_borrowed, None
    for loop in loops.values():
        await loop.reconcile()  # the first round writes the quotas' status
    client.writes = 0
    rng = random.Random(seed)
    took: dict[str, list[float]] = {way: [] for way in VARIANTS}
    for i in range(rounds):
        for way in VARIANTS if i % 2 else reversed(VARIANTS):
            touch(rng.choice(objs["pods"]), feeder, i)
            t0 = time.process_time()
            done = await loops[way].reconcile()
            took[way].append((time.process_time() - t0) * 1000)
            assert not done.plan.admit, "the pool is at rest: nothing to admit"
    out: dict[str, Any] = {"pods": len(objs["pods"]), "rounds_each": rounds}
    for way, times in took.items():
        ordered = sorted(times)
        out[way] = {
            "cpu_ms_median": round(statistics.median(ordered), 3),
            "cpu_ms_p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        }
    out["afresh_over_kept"] = round(
        out["afresh"]["cpu_ms_median"] / out["kept"]["cpu_ms_median"], 2
    )
    out["writes_in_measured_rounds"] = client.writes
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 7500, 20000])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {
        "benchmark": "the admission round owed one pod change: marks and accounts kept vs afresh",
        "nodes": args.nodes,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "sizes": [asyncio.run(size(args.nodes, n, args.rounds, args.seed)) for n in args.pods],
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
