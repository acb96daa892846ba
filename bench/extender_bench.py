"""Extender filter+prioritize latency over HTTP, synthetic cache, before and after; prints JSON.

    python bench/extender_bench.py [--nodes 1000,5000] [--pods 300] [--policy gpupool] [--modes ...]

Each node has 8 A100-80GB cards; a seeded share of every card is already held by leases (so some
nodes fail the filter with a specific reason). Each measured pod is one POST /filter with every
node name (nodeCacheCapable: kube-scheduler sends the names of all nodes that passed its own
filters) followed by one POST /prioritize with the names that passed, as kube-scheduler does, over
a real TCP socket (aiohttp server and client on loopback). Target (issue 5): p99 < 10 ms at 5,000
nodes.

Three modes run one after the other in one invocation, each on its own server over the same seeded
cache and pods: `before` (the first server, kept in bench/extender_before.py: standard library
JSON, prioritize's reply built as dicts, the client in the server's process: the bench as first
written), `after-same-process` (the
server as it is now, the same client: the server's gain at equal measurement) and `after` (the
server as it is now, on uvloop as `gpupool extender` runs it, the client in its own process, as
kube-scheduler is). `filter_prioritize_ms`
is the round trip the client sees, `server_handlers_ms` the server's filter plus prioritize handler
time per pod; `ratios` divides each mode's figures by `before`'s. The `after` client encodes and
decodes with msgspec (kube-scheduler is Go; Python's json module would bill the client's own work
to the extender).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import platform
import random
import time
import uuid
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import msgspec
import numpy as np
from aiohttp import web
from extender_before import MSGSPEC, STDLIB, JsonCodec, make_before_app

from gpupool.adapters.extender_http.server import make_app
from gpupool.adapters.extender_http.service import Extender
from gpupool.adapters.extender_http.wire import ExtenderArgs
from gpupool.adapters.kubernetes.node import read_node
from gpupool.cli.daemon import run_loop
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef

GPUS = 8
CARD = 72 * GiB  # A100-80GB less the 10% reserve
SHAPES = ("4Gi", "12Gi", "30Gi", "60Gi")
JSON = {"Content-Type": "application/json"}
TARGET_RATIO = 2.0  # issue 13: the round trip within 2x the echo floor's, per cluster size


def synthetic_cache(n: int, seed: int) -> ClusterCache:
    rng = random.Random(seed)
    nodes = [
        {
            "metadata": {
                "name": f"node-{i:05d}",
                "labels": {"gpupool.io/gpu-model": "A100-80GB", "gpupool.io/gpu-count": str(GPUS)},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(n)
    ]
    leases = []
    for i in range(n):
        for g in range(GPUS):
            held = rng.choice((0, 0, 12, 24, 36, 48, 60, 72))
            if held:
                uid = f"l-{i}-{g}"
                leases.append(
                    LeaseRecord(
                        name=uid,
                        namespace="bench",
                        tenant="bench",
                        pod=PodRef("bench", uid, uid),
                        node=f"node-{i:05d}",
                        slices=(Slice(g, f"GPU-node-{i:05d}-{g}", "A100-80GB", 0, held * GiB, 0),),
                        amount=held * GiB,
                    )
                )
    cache = ClusterCache()
    cache.rebuild([read_node(n) for n in nodes], [], leases)
    cache.snapshot()
    return cache


def pod(memory: str) -> dict[str, Any]:
    limits = {"gpupool.io/gpu-memory": memory, "gpupool.io/vgpu": "1"}
    return {
        "metadata": {"name": "p", "namespace": "bench", "uid": str(uuid.uuid4())},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


MODES: dict[str, dict[str, Any]] = {
    # the wire's floor: the same HTTP stack and codec (aiohttp on uvloop, msgspec) decoding the
    # same request bodies and encoding the same replies, with no extender behind them
    "echo": {
        "server": "echo",
        "client": "own process",
        "client_codec": "msgspec",
    },
    # before: the first server (extender_before.py), the client in the server's process
    "before": {
        "server": "extender_before.py",
        "client": "same process",
        "client_codec": "json",
    },
    # the server as it is now, measured by the same in-process client (same measurement, new code)
    "after-same-process": {
        "server": "gpupool",
        "client": "same process",
        "client_codec": "json",
    },
    # the server as it is now, the client in its own process (as kube-scheduler is) with a codec
    # nearer Go's encoding/json than the standard library's
    "after": {
        "server": "gpupool",
        "client": "own process",
        "client_codec": "msgspec",
    },
}


def echo_app(n: int, seed: int, policy: str, pods: int) -> web.Application:
    """The wire floor: each POST is read and decoded with msgspec like the extender's, and
    answered with the extender's own reply to the same call (worked out before the clock
    starts, encoded with msgspec per call): the passing names and failure reasons for /filter,
    a score per passing node for /prioritize. So the bytes each way are the real ones, and the
    difference to `after` is the extender's own work."""
    names = [f"node-{i:05d}" for i in range(n)]
    extender = Extender(synthetic_cache(n, seed), policy=policy)
    rng = random.Random(seed)
    filters: list[Any] = []
    priorities: list[Any] = []
    for _ in range(pods + 20):  # the client's sequence of pods (same seed, same draws)
        args = ExtenderArgs.from_json({"Pod": pod(rng.choice(SHAPES)), "NodeNames": names})
        result = extender.filter(args)
        filters.append(result.to_json())
        ok = ExtenderArgs(args.pod, result.node_names or ())
        priorities.append([h.to_json() for h in extender.prioritize(ok)])
    served = {"filter": 0, "prioritize": 0}

    def verb(kind: str, replies: list[Any]) -> Any:
        async def handle(request: web.Request) -> web.Response:
            msgspec.json.decode(await request.read())
            k = served[kind] % len(replies)
            served[kind] += 1
            return web.Response(
                body=msgspec.json.encode(replies[k]), content_type="application/json"
            )

        return handle

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/filter", verb("filter", filters))
    app.router.add_post("/prioritize", verb("prioritize", priorities))
    return app


async def start_server(
    n: int, seed: int, policy: str, mode: str, pods: int
) -> tuple[web.AppRunner, int, list[float], float]:
    """The extender app on loopback over a synthetic cache; handler times (ms) go to a list."""
    started = time.perf_counter()
    spec = MODES[mode]
    if spec["server"] == "echo":
        app = echo_app(n, seed, policy, pods)
        build_s = time.perf_counter() - started
        gc.freeze()
    else:
        cache = synthetic_cache(n, seed)
        build_s = time.perf_counter() - started
        gc.freeze()  # as the extender does after each full sync (informer.py)
        extender = Extender(cache, policy=policy)
        app = (
            make_before_app(extender)
            if spec["server"] == "extender_before.py"
            else make_app(extender)
        )
    handler_ms: list[float] = []

    @web.middleware
    async def timed(request: web.Request, handler: Any) -> web.StreamResponse:
        t0 = time.perf_counter()
        response: web.StreamResponse = await handler(request)
        handler_ms.append((time.perf_counter() - t0) * 1000)
        return response

    app.middlewares.append(timed)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1]), handler_ms, build_s


async def client(
    port: int, n: int, pods: int, seed: int, codec: JsonCodec
) -> tuple[list[float], list[int]]:
    """What kube-scheduler does per pod: filter with every node name, prioritize the passing ones.
    Round trips in ms, measured after 20 warm-up pods."""
    names = [f"node-{i:05d}" for i in range(n)]
    samples: list[float] = []
    passed: list[int] = []
    rng = random.Random(seed)
    async with aiohttp.ClientSession(trust_env=False) as http:
        for k in range(pods + 20):
            body = {"Pod": pod(rng.choice(SHAPES)), "Nodes": None, "NodeNames": names}
            t0 = time.perf_counter()
            async with http.post(
                f"http://127.0.0.1:{port}/filter", data=codec.encode(body), headers=JSON
            ) as resp:
                result = codec.decode(await resp.read())
            ok = result["NodeNames"] or []
            body["NodeNames"] = ok
            async with http.post(
                f"http://127.0.0.1:{port}/prioritize", data=codec.encode(body), headers=JSON
            ) as resp:
                scores = codec.decode(await resp.read())
            elapsed = time.perf_counter() - t0
            assert len(scores) == len(ok)
            if k >= 20:
                samples.append(elapsed * 1000)
                passed.append(len(ok))
    return samples, passed


def _serve_in_child(n: int, seed: int, policy: str, mode: str, pods: int, conn: Connection) -> None:
    async def run() -> None:
        runner, port, handler_ms, build_s = await start_server(n, seed, policy, mode, pods)
        conn.send((port, build_s))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # "stop"
        conn.send(handler_ms)
        await runner.cleanup()

    run_loop(run())  # the extender's own event loop (uvloop), as `gpupool extender` runs it


def _percentiles(values: list[float]) -> dict[str, float]:
    arr = np.array(values)
    return {
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p90": round(float(np.percentile(arr, 90)), 3),
        "p99": round(float(np.percentile(arr, 99)), 3),
        "max": round(float(arr.max()), 3),
    }


def measure(n: int, pods: int, policy: str, seed: int, mode: str) -> dict[str, Any]:
    client_codec = MSGSPEC if MODES[mode]["client_codec"] == "msgspec" else STDLIB
    if MODES[mode]["client"] == "same process":

        async def both() -> tuple[list[float], list[int], list[float], float]:
            runner, port, handler_ms, build_s = await start_server(n, seed, policy, mode, pods)
            samples, passed = await client(port, n, pods, seed, client_codec)
            await runner.cleanup()
            return samples, passed, handler_ms, build_s

        samples, passed, handler_ms, build_s = asyncio.run(both())
    else:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve_in_child, args=(n, seed, policy, mode, pods, child))
        proc.start()
        port, build_s = parent.recv()
        samples, passed = asyncio.run(client(port, n, pods, seed, client_codec))
        parent.send("stop")
        handler_ms = parent.recv()
        proc.join(timeout=30)
    # the server's own time per pod: its filter and prioritize handlers, after the warm-up
    per_pod = [a + b for a, b in zip(handler_ms[0::2], handler_ms[1::2], strict=True)][20:]
    return {
        "mode": mode,
        **MODES[mode],
        "nodes": n,
        "gpus": n * GPUS,
        "pods": pods,
        "policy": policy,
        "cache_build_s": round(build_s, 3),
        "filter_prioritize_ms": _percentiles(samples),
        "server_handlers_ms": _percentiles(per_pod),
        "nodes_passing_filter_mean": round(float(np.mean(passed)), 1),
        "target_p99_ms": 10.0,
        "meets_target": bool(np.percentile(np.array(samples), 99) < 10.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000,15000")
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--policy", default="gpupool")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--modes", default="echo,after", help=f"of {', '.join(MODES)}")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    floor: list[dict[str, Any]] = []
    for n in (int(x) for x in args.nodes.split(",")):
        by_mode = {
            m: measure(n, args.pods, args.policy, args.seed, m) for m in args.modes.split(",")
        }
        results.extend(by_mode.values())
        echo = by_mode.get("echo")
        if echo is not None:
            for mode, r in by_mode.items():
                if mode == "echo":
                    continue
                floor.append(
                    {
                        "nodes": n,
                        "mode": mode,
                        "p50_vs_echo": round(r["filter_prioritize_ms"]["p50"]
                                             / echo["filter_prioritize_ms"]["p50"], 2),
                        "p99_vs_echo": round(r["filter_prioritize_ms"]["p99"]
                                             / echo["filter_prioritize_ms"]["p99"], 2),
                        "target_ratio": TARGET_RATIO,
                        "within_target": r["filter_prioritize_ms"]["p50"]
                        <= TARGET_RATIO * echo["filter_prioritize_ms"]["p50"],
                    }
                )  # fmt: skip
        before = by_mode.get("before")
        if before is not None:
            for mode, r in by_mode.items():
                if mode == "before":
                    continue
                ratios.append(
                    {
                        "nodes": n,
                        "mode": mode,
                        "p50_vs_before": round(r["filter_prioritize_ms"]["p50"]
                                               / before["filter_prioritize_ms"]["p50"], 3),
                        "p99_vs_before": round(r["filter_prioritize_ms"]["p99"]
                                               / before["filter_prioritize_ms"]["p99"], 3),
                        "server_p99_vs_before": round(r["server_handlers_ms"]["p99"]
                                                      / before["server_handlers_ms"]["p99"], 3),
                    }
                )  # fmt: skip
    print(
        json.dumps(
            {
                "bench": "extender-filter-prioritize",
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "load_average": os.getloadavg(),
                "results": results,
                "vs_echo_floor": floor,
                "ratios": ratios,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
