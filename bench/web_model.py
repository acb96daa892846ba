"""The web view's own CPU at the Alibaba cluster's size, before and after the model kept between
renders, side by side in one process; prints JSON.

    .venv/bin/python bench/web_model.py [--nodes 1213] [--leases 1000] [--window 60]
        [--flaps-per-min 0] [--step 30] [--out bench/results/NAME.json]

No API server: the web view's watch cache (`WatchCache`, the web view's kinds) is fed by hand as
its reflectors feed it, with a generated pool of `--nodes` nodes of eight A100-80GB cards, their
GpuNodes, `--leases` GpuLeases of 4-24 GiB with their running pods, and twelve tenants' GpuQuotas
(bench/web_state.py's pool, as the API server's JSON). What the cluster does in a window:

- `idle`: nothing but kwok's node heartbeats (a Node status write that moves only
  `lastHeartbeatTime`, each node every 10-20 minutes: `--nodes`/900 a second);
- `flapping`: the same, and `--flaps-per-min` Node writes that flip a node's Ready condition
  (the dev cluster's kwok nodes do this, about 2.5 per node a minute: bench/web_idle.py's
  `changes_not_heartbeats_per_min`), when `--flaps-per-min` is given.

Each window is run three times: the feeding alone (`feed_only`: what the watch costs either way),
`before` (the view built afresh from one read of the cache after each change, debounced, and
every `--step` seconds: the web view until this change) and `after` (adapters/web/feed.py and
state/views/live.py: what changed, folded into the views kept between renders; the stepped
clock's moves). Reported per window: CPU seconds a minute of the process (all threads) for each,
and for before and after less the feeding (`view_cpu_s_per_min`); renders run and published.
The load average at the start and the end says how busy the machine was.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from emit import emit
from web_state import TENANTS, pool

from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.adapters.kubernetes.views_read import read_views
from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.adapters.web.feed import CacheFeed
from gpupool.adapters.web.source import StateSource
from gpupool.adapters.web.ticks import stepped, until_step
from gpupool.cli.web import WEB_KINDS
from gpupool.domain.units import GiB
from gpupool.state.objects import Event

Json = dict[str, Any]


def node_json(name: str, *, ready: bool = True, beat: int = 0) -> Json:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"type": "kwok"}},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "Unknown",
                 "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                 "lastHeartbeatTime": f"2027-01-15T08:{beat // 60 % 60:02d}:{beat % 60:02d}Z"}
            ]
        },
    }  # fmt: skip


def gpunode_json(name: str) -> Json:
    devices = [
        {"index": i, "model": "A100-80GB", "uuid": f"GPU-{name}-{i}", "memoryBytes": 80 * GiB,
         "allocatableBytes": 72 * GiB}
        for i in range(8)
    ]  # fmt: skip
    return {"metadata": {"name": name, "uid": f"uid-gn-{name}"},
            "status": {"health": "Healthy", "devices": devices}}  # fmt: skip


def pod_json(namespace: str, name: str, tenant: str, node: str, gib: int) -> Json:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "labels": {"gpupool.io/tenant": tenant}, "annotations": {},
                     "creationTimestamp": "2027-01-15T08:00:00Z"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
            "limits": {"gpupool.io/gpu-memory": f"{gib}Gi"}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def objects(nodes: int, leases: int) -> dict[str, list[Json]]:
    inputs = pool(nodes, leases)
    out: dict[str, list[Json]] = {"nodes": [], "gpunodes": [], "gpuleases": [], "pods": []}
    for n in inputs.nodes:
        out["nodes"].append(node_json(n.name))
        out["gpunodes"].append(gpunode_json(n.name))
    for x in inputs.leases:
        body = lease_to_json(x)
        body["metadata"] = {"name": x.name, "namespace": x.namespace, "uid": f"uid-l-{x.name}"}
        out["gpuleases"].append(body)
        gib = x.memory_bytes // GiB
        out["pods"].append(pod_json(x.pod.namespace, x.pod.name, x.tenant, x.node, gib))
    out["gpuquotas"] = [
        {"metadata": {"name": t, "uid": f"uid-q-{t}"}, "spec": {"nominal": "4096Gi"},
         "status": {"usedAmount": 0}}
        for t in TENANTS
    ]  # fmt: skip
    return out


class Feeder:
    """Writes into a watch cache as its reflectors would (a new resourceVersion each write)."""

    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache
        self.version = 0

    def write(self, kind: str, obj: Json, event: Event = Event.MODIFIED) -> None:
        obj = copy.deepcopy(obj)  # the watch decodes a new object for every event
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        reflector = self.cache.reflectors[kind]
        change = reflector.store.apply(event, obj)
        if change is not None:
            reflector.changed(change)

    def load(self, objs: dict[str, list[Json]]) -> None:
        """Every object as the first lists bring them; then every store is synced."""
        for kind, items in objs.items():
            for obj in items:
                self.write(kind, obj, Event.ADDED)
        for reflector in self.cache.reflectors.values():
            reflector.store.synced = True
            reflector.synced.set()


async def drive(feeder: Feeder, names: list[str], args: argparse.Namespace, seconds: float,
                flapping: bool) -> int:  # fmt: skip
    """The cluster's writes for `seconds`: heartbeats, and flaps when `flapping`."""
    rng = random.Random(11)
    beats_per_s = len(names) / 900.0
    flaps_per_s = args.flaps_per_min / 60.0 if flapping else 0.0
    rate = beats_per_s + flaps_per_s
    ready = dict.fromkeys(names, True)
    writes = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(rng.expovariate(rate))
        name = rng.choice(names)
        if rng.random() < flaps_per_s / rate:
            ready[name] = not ready[name]
        feeder.write("nodes", node_json(name, ready=ready[name], beat=writes))
        writes += 1
    return writes


async def run(variant: str, objs: dict[str, list[Json]], args: argparse.Namespace,
              flapping: bool) -> dict[str, Any]:  # fmt: skip
    cache = WatchCache(cast(Any, None), WEB_KINDS)  # never lists: fed below
    feeder = Feeder(cache)
    clock = stepped(time.time, args.step)
    source: StateSource | None = None
    feed: CacheFeed | None = None
    if variant == "before":  # the web view until this change: read, build afresh, debounced
        source = StateSource.reading(
            lambda: read_views(cast(Any, None), cache=cache), clock, resync_s=args.step
        )
        cache.subscribe(lambda _change: cast(StateSource, source).poke())
    elif variant == "after":
        source = StateSource(
            lambda now: cast(CacheFeed, feed).render(now),
            clock,
            resync_s=args.step,
            until_step=until_step(time.time, args.step),
        )
        feed = CacheFeed(cache, source.poke)
    feeder.load(objs)
    stop = asyncio.Event()
    task = asyncio.ensure_future(source.run(stop)) if source is not None else None
    if source is not None:
        await source.ready.wait()
    await asyncio.sleep(2)  # the first render's tail
    renders = source.renders if source is not None else 0
    version = source.current.version if source is not None else 0
    t0, w0 = time.process_time(), time.monotonic()
    writes = await drive(feeder, [o["metadata"]["name"] for o in objs["nodes"]], args,
                         args.window, flapping)  # fmt: skip
    cpu, wall = time.process_time() - t0, time.monotonic() - w0
    stop.set()
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    out: dict[str, Any] = {
        "cpu_s_per_min": round(cpu / wall * 60, 3),
        "node_writes_per_min": round(writes / wall * 60, 1),
    }
    if source is not None:
        out["renders"] = source.renders - renders
        out["published"] = source.current.version - version
    return out


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    objs = objects(args.nodes, args.leases)
    windows = ["idle"] + (["flapping"] if args.flaps_per_min else [])
    out: dict[str, Any] = {}
    for name in windows:
        flapping = name == "flapping"
        got = {v: await run(v, objs, args, flapping) for v in ("feed_only", "before", "after")}
        base = got["feed_only"]["cpu_s_per_min"]
        for v in ("before", "after"):
            got[v]["view_cpu_s_per_min"] = round(max(0.0, got[v]["cpu_s_per_min"] - base), 3)
        out[name] = got
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--flaps-per-min", type=float, default=0.0)
    parser.add_argument("--step", type=float, default=30.0, help="--resync-seconds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "web view CPU at size, in process: before and after the kept model",
        "command": " ".join(sys.argv),
        "nodes": args.nodes,
        "cards": args.nodes * 8,
        "leases": args.leases,
        "step_s": args.step,
        "window_s": args.window,
        "cpus": os.cpu_count(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    result.update(asyncio.run(bench(args)))
    result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit(result, args.out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
