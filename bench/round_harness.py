"""What lease_rounds.py and admission_rounds.py share: the pool at rest in the controller's
watch cache (no API server), a change that decides nothing, the CPU figures of a way of running
a round, and the command line that runs a round's cost at several sizes and prints JSON.

The pool is web_model.py's generated one (`--nodes` nodes of eight A100-80GB cards, their
GpuNodes, leases of 4-24 GiB with their pods, twelve tenants' GpuQuotas) at rest: every lease
Active since an hour, every pod admitted and Running.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

from emit import emit
from web_model import Feeder, objects

from gpupool.adapters.kubernetes.watch_cache import CONTROLLER_KINDS, WatchCache
from gpupool.cli.daemon import GC_YOUNG_THRESHOLD
from gpupool.rfc3339 import format_time

NOW = 1_800_000_000.0
ADMITTED = '{"at":"2027-01-15T08:00:00Z","borrowed":0,"preemptible":false}'

Objects = dict[str, list[dict[str, Any]]]
Size = Callable[[int, int, int, int], Coroutine[Any, Any, dict[str, Any]]]


def cluster(nodes: int, leases: int) -> Objects:
    """The pool at rest: every lease Active since an hour, every pod admitted and Running."""
    objs = objects(nodes, leases)
    for lease in objs["gpuleases"]:
        lease["status"] = {"phase": "Active", "start": format_time(NOW - 3600),
                           "boundAt": format_time(NOW - 3590),
                           "activeAt": format_time(NOW - 3580)}  # fmt: skip
    for pod in objs["pods"]:
        pod["metadata"]["annotations"]["gpupool.io/admitted"] = ADMITTED
    return objs


def fed_cache(objs: Objects) -> tuple[WatchCache, Feeder]:
    """The controller's watch cache holding `objs`, as its first lists would leave it."""
    cache = WatchCache(cast(Any, None), CONTROLLER_KINDS)  # never lists: fed here
    feeder = Feeder(cache)
    feeder.load(objs)
    return cache, feeder


def touch(pod: dict[str, Any], feeder: Feeder, i: int) -> str:
    """A change to `pod` that decides nothing (an annotation), as the watch delivers it; its key."""
    pod["metadata"]["annotations"]["bench/touched"] = str(i)
    feeder.write("pods", pod)
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def cpu_ms(times: list[float]) -> dict[str, float]:
    """The mean, median and p90 of a way's rounds, CPU milliseconds (the mean: what the rounds
    cost in all, the cyclic GC's full collections included)."""
    ordered = sorted(times)
    return {
        "cpu_ms_mean": round(statistics.fmean(ordered), 3),
        "cpu_ms_median": round(statistics.median(ordered), 3),
        "cpu_ms_p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
    }


def side_by_side(
    took: dict[str, list[float]], slow: str, fast: str, digits: int = 2
) -> dict[str, Any]:
    """Each way's CPU figures (`cpu_ms`) and `<slow>_over_<fast>`: the ratio of their medians."""
    out: dict[str, Any] = {way: cpu_ms(times) for way, times in took.items()}
    ratio = out[slow]["cpu_ms_median"] / out[fast]["cpu_ms_median"]
    out[f"{slow}_over_{fast}"] = round(ratio, digits)
    return out


def main(doc: str, benchmark: str, objects_flag: str, rounds: int, size: Size) -> int:
    """The command line: `size(nodes, n, rounds, seed)` for each `--<objects_flag>` n."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument(f"--{objects_flag}", type=int, nargs="+", default=[1000, 7500, 20000])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--gc-young",
        type=int,
        nargs="+",
        default=[GC_YOUNG_THRESHOLD],
        help="the cyclic GC's young-generation threshold(s), each measured in turn (default: "
        "the daemons', cli.daemon.GC_YOUNG_THRESHOLD; 700 is Python's own)",
    )
    args = parser.parse_args()
    sizes = getattr(args, objects_flag)
    runs = []
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    _, older, oldest = gc.get_threshold()
    for young in args.gc_young:
        gc.set_threshold(young, older, oldest)
        for n in sizes:
            gc.collect()  # each size starts from the same clean heap
            runs.append(
                {"gc_young": young} | asyncio.run(size(args.nodes, n, args.rounds, args.seed))
            )
    result = {
        "benchmark": benchmark,
        "nodes": args.nodes,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_avg_at_start": load_at_start,
        "sizes": runs,
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    emit(result, args.out, indent=2)
    return 0
