"""What the nodes' heartbeat Leases cost the controller's watch cache to read, at the dev
cluster's old heartbeat period (10 s) beside the agent's default (`DEFAULT_HEARTBEAT_S`, 30 s),
in one run; prints JSON.

    .venv/bin/python bench/watch_stream.py [--nodes 5000] [--seconds 20]

The stream is what a controller of `--nodes` nodes hears from their Leases (one renewal per node
every period, spread evenly): a separate process serves it over plain HTTP as the API server
does, one chunk per event, so only the reader's CPU is counted (time.process_time of this
process while the watch cache's `Reflector` folds `--seconds` of events into its store, uvloop
as the controller runs it). TLS, which the real stream also has, adds to both. Each period runs
twice, alternating. The cost is per event (HTTP chunk parsing in h11/httpx about two thirds of
it, the store the rest), so it follows the rate: the period is the lever. Reading the stream as
bytes and decoding every whole line of a read at once (`msgspec` `decode_lines`) instead of
httpx's `aiter_lines` was tried and measured the same (25 against 24 us an event).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import socket
import statistics
import sys
import time
from typing import Any

import uvloop
from aiohttp import web
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User

from gpupool.adapters.kubernetes.watch_cache import NODE_LEASES, Reflector
from gpupool.domain.heartbeat import DEFAULT_HEARTBEAT_S
from gpupool.state.objects import ObjectStore


def lease_event(i: int, version: int) -> bytes:
    return json.dumps({
        "type": "MODIFIED",
        "object": {
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": {
                "name": f"node-{i:05d}", "namespace": "gpupool-node-lease",
                "uid": f"4b2e0a1c-8a4e-4a5e-9d7b-{i:012d}", "resourceVersion": str(version),
                "creationTimestamp": "2026-12-06T02:00:00Z",
                "managedFields": [{
                    "manager": "gpupool", "operation": "Update",
                    "apiVersion": "coordination.k8s.io/v1", "time": "2026-12-06T02:35:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {},
                                            "f:renewTime": {}}},
                }],
            },
            "spec": {"holderIdentity": f"node-{i:05d}", "leaseDurationSeconds": 90,
                     "renewTime": f"2026-12-06T02:35:{i % 60:02d}.123456Z"},
        },
    }).encode() + b"\n"  # fmt: skip


def serve(port: int, nodes: int, seconds: float) -> None:
    """One watch stream a request: `nodes` renewals a period (the path's first segment,
    `p<seconds>`), for `seconds`."""
    tick_s = 0.05

    async def watch(request: web.Request) -> web.StreamResponse:
        period_s = float(request.match_info["tail"].split("/")[0].removeprefix("p"))
        per_tick = nodes * tick_s / period_s
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        start, sent, version = time.monotonic(), 0, 1000
        while (now := time.monotonic()) - start < seconds:
            due = int((now - start) / tick_s * per_tick)
            while sent < due:
                version += 1
                await response.write(lease_event(sent % nodes, version))  # a chunk an event
                sent += 1
            await asyncio.sleep(tick_s)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", watch)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=False)


async def read_once(port: int, period_s: float) -> dict[str, float]:
    # the period rides on the server's URL: the watch request's path and query follow it
    client = AsyncClient(
        KubeConfig.from_one(
            cluster=Cluster(server=f"http://127.0.0.1:{port}/p{period_s:g}"), user=User()
        ),
        trust_env=False,
    )
    store, heard = ObjectStore("node-leases"), [0]

    def changed(_: Any) -> None:
        heard[0] += 1

    reflector = Reflector(client, NODE_LEASES, store, changed)
    reflector.version = "1"
    cpu, wall = time.process_time(), time.monotonic()
    await reflector.watch()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    await client.close()
    return {"events": heard[0], "cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
            "us_per_event": round(cpu / max(heard[0], 1) * 1e6, 1)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0, help="each stream's length")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = multiprocessing.Process(
        target=serve, args=(port, args.nodes, args.seconds), daemon=True
    )
    server.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                print("the stream server did not start", file=sys.stderr)
                return 1
            time.sleep(0.1)
    periods = {"old_dev_cluster": 10.0, "agent_default": DEFAULT_HEARTBEAT_S}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in periods}
    for name in [*periods, *periods]:
        runs[name].append(uvloop.run(read_once(port, periods[name])))
    server.terminate()
    per_min = {
        name: statistics.median(r["cpu_s"] / r["wall_s"] * 60 for r in v)
        for name, v in runs.items()
    }
    ratio = per_min["agent_default"] / per_min["old_dev_cluster"]
    print(json.dumps({
        "benchmark": "the nodes' heartbeat Leases' watch stream, read by the watch cache",
        "nodes": args.nodes, "seconds": args.seconds, "periods_s": periods,
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "runs": runs,
        "median_us_per_event": {
            name: statistics.median(r["us_per_event"] for r in v) for name, v in runs.items()
        },
        "median_cpu_s_per_min": {name: round(v, 2) for name, v in per_min.items()},
        "ratio_agent_default_to_old": round(ratio, 3),
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
