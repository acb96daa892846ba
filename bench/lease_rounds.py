"""The lease loop's round owed one pod change, decided over every lease (as every round was
before the loop decided per lease) and over what the change touches, side by side in one
process at several cluster sizes; prints JSON.

    .venv/bin/python bench/lease_rounds.py [--leases 1000 7500 20000] [--nodes 1213]
        [--rounds 40] [--out bench/results/NAME.json]

No API server: the controller's own adapter (`KubeClusterApi`) reads a watch cache fed by hand
as its reflectors feed it (round_harness.py's pool at rest: `--nodes` nodes of eight A100-80GB
cards, their GpuNodes, `--leases` GpuLeases with their running, admitted pods, twelve tenants'
GpuQuotas). Each round a random pod's annotation changes (a new resourceVersion, as
the watch delivers it); then the round runs owed everything (`whole`) or owed that change
(`per_key`), alternating, on two reconcilers over the same cache. The change decides nothing,
so the figure is what a round costs beyond its writes: in a fill, every new pod's and lease's
watch events owe the loop a round. The client refuses every call: a round that wrote would
fail the run. Reported per size: the median and p90 CPU milliseconds of a round each way and
their ratio.
"""

from __future__ import annotations

import random
import time
from typing import Any, cast

from round_harness import NOW, cluster, fed_cache, main, side_by_side, touch

from gpupool.adapters.cluster import KubeClusterApi
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.work_queue import EVERYTHING, Owed


class RefusingClient:
    """Any call is a write (the reads go to the watch cache): the bench's rounds make none."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the round called the API server: {name}")


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
    out |= side_by_side(took, "whole", "per_key", digits=1)
    return out


if __name__ == "__main__":
    raise SystemExit(
        main(__doc__, "the lease loop's round owed one pod change: over every lease vs per key",
             "leases", 40, size)
    )  # fmt: skip
