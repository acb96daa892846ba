"""The lease loop's round owed one pod change, decided over every lease (as every round was
before the loop decided per lease) and over what the change touches, side by side in one
process at several cluster sizes; prints JSON.

    .venv/bin/python bench/lease_rounds.py [--leases 1000 7500 20000] [--nodes 1213]
        [--rounds 40] [--out bench/results/NAME.json]

No API server: the controller's own adapter (`KubeClusterApi`) reads a watch cache fed by hand
as its reflectors feed it (bench/web_model.py's generated pool: `--nodes` nodes of eight
A100-80GB cards, their GpuNodes, `--leases` GpuLeases with their running, admitted pods, twelve
tenants' GpuQuotas). Each round a random pod's annotation changes (a new resourceVersion, as
the watch delivers it); then the round runs owed everything (`whole`) or owed that change
(`per_key`), alternating, on two reconcilers over the same cache. The change decides nothing,
so the figure is what a round costs beyond its writes: in a fill, every new pod's and lease's
watch events owe the loop a round. The client refuses every call: a round that wrote would
fail the run. Reported per size: the median and p90 CPU milliseconds of a round each way and
their ratio.
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

from web_model import Feeder, objects

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.adapters.kubernetes.watch_cache import CONTROLLER_KINDS, WatchCache
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.work_queue import EVERYTHING, Owed
from gpupool.rfc3339 import format_time
from gpupool.state.objects import Event

NOW = 1_800_000_000.0
ADMITTED = '{"at":"2027-01-15T08:00:00Z","borrowed":0,"preemptible":false}'


class RefusingClient:
    """Any call is a write (the reads go to the watch cache): the bench's rounds make none."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the round called the API server: {name}")


def cluster(nodes: int, leases: int) -> dict[str, list[dict[str, Any]]]:
    """The pool at rest: every lease Active since an hour, every pod admitted and Running."""
    objs = objects(nodes, leases)
    for lease in objs["gpuleases"]:
        lease["status"] = {"phase": "Active", "start": format_time(NOW - 3600),
                           "boundAt": format_time(NOW - 3590),
                           "activeAt": format_time(NOW - 3580)}  # fmt: skip
    for pod in objs["pods"]:
        pod["metadata"]["annotations"]["gpupool.io/admitted"] = ADMITTED
    return objs


def fed_cache(objs: dict[str, list[dict[str, Any]]]) -> tuple[WatchCache, Feeder]:
    """The controller's watch cache holding `objs`, as its first lists would leave it."""
    cache = WatchCache(cast(Any, None), CONTROLLER_KINDS)  # never lists: fed here
    feeder = Feeder(cache)
    for kind, items in objs.items():
        for obj in items:
            feeder.write(kind, obj, Event.ADDED)
    for reflector in cache.reflectors.values():
        reflector.store.synced = True
        reflector.synced.set()
    return cache, feeder


def touch(pod: dict[str, Any], feeder: Feeder, i: int) -> str:
    """A change to `pod` that decides nothing (an annotation), as the watch delivers it; its key."""
    pod["metadata"]["annotations"]["bench/touched"] = str(i)
    feeder.write("pods", pod)
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


async def size(nodes: int, leases: int, rounds: int, seed: int) -> dict[str, Any]:
    objs = cluster(nodes, leases)
    cache, feeder = fed_cache(objs)
    api = KubeClusterApi(cast(Any, RefusingClient()), cache=cache)
    loops = {way: LeaseReconciler(api, lambda: NOW) for way in ("whole", "per_key")}
    for loop in loops.values():
        await loop.reconcile()  # the first round: everything (the index, the deadlines)
    rng = random.Random(seed)
    pods = objs["pods"]
    took: dict[str, list[float]] = {way: [] for way in loops}
    for i in range(rounds):
        for way in ("whole", "per_key") if i % 2 else ("per_key", "whole"):
            key = touch(rng.choice(pods), feeder, i)
            owed = EVERYTHING if way == "whole" else Owed(frozenset({("pods", key)}), False)
            t0 = time.process_time()
            plan = await loops[way].reconcile(owed)
            took[way].append((time.process_time() - t0) * 1000)
            assert not (plan.moves or plan.collect or plan.sweep), "the change decided nothing"
    out: dict[str, Any] = {"leases": leases, "pods": len(pods), "rounds_each": rounds}
    for way, times in took.items():
        ordered = sorted(times)
        out[way] = {
            "cpu_ms_median": round(statistics.median(ordered), 3),
            "cpu_ms_p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        }
    out["whole_over_per_key"] = round(
        out["whole"]["cpu_ms_median"] / out["per_key"]["cpu_ms_median"], 1
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, nargs="+", default=[1000, 7500, 20000])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {
        "benchmark": "the lease loop's round owed one pod change: over every lease vs per key",
        "nodes": args.nodes,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "sizes": [asyncio.run(size(args.nodes, n, args.rounds, args.seed)) for n in args.leases],
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
