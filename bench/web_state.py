"""The cost of the web view's state on a large pool; prints JSON.

    .venv/bin/python bench/web_state.py [--nodes 1000] [--leases 10000] [--repeat 5]
    .venv/bin/python bench/web_state.py --nodes 1213 --leases 12130 --repeat 1  # web_delta_1213

A generated pool (8 cards a node, `--leases` slices of 4-24Gi spread over the cards, twelve
tenants with a namespace each) is served by the real `gpupool web` app (aiohttp, on loopback),
with the cluster read left out: the `StateSource` is fed the decoded values directly, and the
API server's TokenReview/SubjectAccessReview are answered by a small in-process stand-in (their
answers are cached by the web view anyway). Measured, median of `--repeat`:

- refresh_ms: one refresh, `build_status` over the pool (what each resync costs the server);
- operator_ms, operator_bytes, operator_gzip_bytes: GET /api/v1/state as an operator (the whole
  pool map), the first after a refresh (it serialises the document), and what goes on the wire
  when the client accepts gzip;
- operator_again_ms: the same GET again on the same snapshot (served from `Rendered`);
- tenant_ms, tenant_bytes: the first for one tenant (its namespace, the other slices nameless);
- event_bytes: one server-sent event as an operator (the same document, pushed on each change).

And the live stream after one pod is placed (a pod waiting for a card gets its lease: one card's
slices and figures, one lease row, the tenant's and the pool's totals, the queue), as an operator:

- delta.state_event_bytes: the first event on a connection, the whole state;
- delta.patch_event_bytes, patch_ops: the `patch` event the placement sends (the web view's clock
  moves in steps of --resync-seconds, adapters/web/ticks.py, so a change within a step moves no
  held time);
- delta.tick_event_bytes, tick_ops: the `patch` event of the next step with nothing placed: every
  live lease's held time and GiB-hours move, and the tenants' sums (once per step);
- delta.diff_ms, tick_diff_ms: `delta.diff` over the two parsed documents (median of 5), the
  server's cost per question for that event (made once for all pages holding the same base).
Both patches are checked: applied to the first event's document, each gives the whole state a GET
answers after the change.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gzip
import json
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "views"))

from pool_fixture import NOW, gpunode, lease, pod

from gpupool.adapters.web.access import Access, Question, Viewer
from gpupool.adapters.web.delta import apply, diff
from gpupool.adapters.web.server import make_app
from gpupool.adapters.web.source import StateSource
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota
from gpupool.state.nodes import NodeObject
from gpupool.state.views.status import ViewInputs

TENANTS = [f"tenant-{i:02d}" for i in range(12)]


LATE = (TENANTS[3], "late-pod", 8)  # the pod placed by the delta measurement: tenant, name, GiB


def pool(nodes: int, leases: int, seed: int = 7) -> ViewInputs:
    rng = random.Random(seed)
    names = [f"pool-{i // 100:02d}-node-{i:04d}" for i in range(nodes)]
    used = {(n, c): 0 for n in names for c in range(8)}
    cards = list(used)
    out = []
    while len(out) < leases:
        n, c = rng.choice(cards)
        size = rng.choice((4, 8, 12, 16, 24))
        if used[(n, c)] + size > 72:
            continue
        out.append(lease(rng.choice(TENANTS), f"{n}-{c}-{len(out)}", n, [(c, used[(n, c)], size)]))
        used[(n, c)] += size
    tenant, name, gib = LATE
    return ViewInputs(
        nodes=[NodeObject(n) for n in names],
        gpunodes=[
            gpunode(n, 8, "Lost" if i % 250 == 3 else "Healthy") for i, n in enumerate(names)
        ],
        leases=out,
        quotas=[TenantQuota(t, nominal=4096 * GiB) for t in TENANTS],
        pods=[pod(tenant, name, gib, gated=False)],  # admitted, waiting for a card
    )


def placed(inputs: ViewInputs) -> ViewInputs:
    """`inputs` with the waiting pod placed on the first card with room for it."""
    tenant, name, gib = LATE
    used: dict[tuple[str, int], int] = {}
    for x in inputs.leases:
        for s in x.slices:
            used[(x.node, s.gpu_index)] = used.get((x.node, s.gpu_index), 0) + s.size_bytes
    node, card = next(k for k, v in used.items() if v + gib * GiB <= 72 * GiB)
    new = lease(tenant, name, node, [(card, used[(node, card)] // GiB, gib)], age_s=0.0)
    running = [pod(tenant, name, gib, gated=False, node=node)]
    return dataclasses.replace(inputs, leases=[*inputs.leases, new], pods=running)


class Reviews:
    """Stands in for the API server: token `operator` may read everything; `tenant-NN` its own
    namespace (named after it) and its own GpuQuota."""

    async def token(self, token: str) -> Viewer | None:
        return Viewer(token)

    async def allowed(self, viewer: Viewer, question: Question) -> bool:
        if viewer.user == "operator":
            return True
        return viewer.user in (question.namespace, question.name)


async def bench(args: argparse.Namespace) -> dict[str, object]:
    inputs = pool(args.nodes, args.leases)
    now = [NOW]  # the source's clock, moved by the delta measurement

    async def read() -> ViewInputs:
        return inputs

    source = StateSource.reading(read, lambda: now[0])
    access = Access(Reviews(), time.monotonic, ttl_s=3600)
    runner = web.AppRunner(make_app(source, access, secure_cookie=False))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/api/v1"
    refresh, operator, again, tenant = [], [], [], []
    sizes: dict[str, int] = {}
    async with aiohttp.ClientSession(auto_decompress=False) as session:

        async def get(token: str) -> tuple[float, int]:
            t0 = time.perf_counter()
            headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"}
            async with session.get(f"{url}/state", headers=headers) as resp:
                body = await resp.read()
                assert resp.status == 200, body[:300]
            ms = (time.perf_counter() - t0) * 1000
            sizes[f"{token}-wire"] = len(body)
            return ms, len(gzip.decompress(body))

        for _ in range(args.repeat):
            t0 = time.perf_counter()
            await source.refresh()
            refresh.append((time.perf_counter() - t0) * 1000)
            ms, sizes["operator"] = await get("operator")
            operator.append(ms)
            ms, _ = await get("operator")
            again.append(ms)
            ms, sizes["tenant"] = await get(TENANTS[0])
            tenant.append(ms)
        headers = {"Authorization": "Bearer operator"}
        async with session.get(f"{url}/events", headers=headers) as resp:
            event = b""
            async for chunk in resp.content.iter_any():
                event += chunk
                if b"data: " in event and event.endswith(b"\n\n"):
                    break
        sizes["event"] = len(event)

        base = inputs

        async def change(to: ViewInputs, clock_s: float) -> dict[str, int | float]:
            """The first event on a new stream, then the event one change sends."""
            nonlocal inputs
            inputs, now[0] = base, NOW
            await source.refresh()
            async with session.get(f"{url}/events", headers=headers) as resp:
                events = _events(resp)
                first = await anext(events)
                inputs, now[0] = to, NOW + clock_s
                await source.refresh()
                second = await anext(events)
            plain = {**headers, "Accept-Encoding": "identity"}
            async with session.get(f"{url}/state", headers=plain) as resp:
                whole = json.loads(await resp.read())
            assert (first[0], second[0]) == (b"state", b"patch"), (first[0], second[0])
            old, patch = json.loads(first[1]), json.loads(second[1])
            assert apply(old, patch["ops"]) == whole, "the patch does not give the state"
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                diff(old, whole)
                times.append((time.perf_counter() - t0) * 1000)
            return {
                "state_event_bytes": len(first[2]),
                "patch_event_bytes": len(second[2]),
                "patch_ops": len(patch["ops"]),
                "diff_ms": round(statistics.median(times), 1),
            }

        one = await change(placed(base), 0.0)
        tick = await change(base, 30.0)
        inputs = base
    await runner.cleanup()
    delta = {
        "state_event_bytes": one["state_event_bytes"],
        "patch_event_bytes": one["patch_event_bytes"],
        "patch_ops": one["patch_ops"],
        "diff_ms": one["diff_ms"],
        "tick_event_bytes": tick["patch_event_bytes"],
        "tick_ops": tick["patch_ops"],
        "tick_diff_ms": tick["diff_ms"],
    }
    return {
        "nodes": args.nodes,
        "cards": args.nodes * 8,
        "leases": len(inputs.leases),
        "tenants": len(TENANTS),
        "repeat": args.repeat,
        "refresh_ms": round(statistics.median(refresh), 1),
        "operator_ms": round(statistics.median(operator), 1),
        "operator_bytes": sizes["operator"],
        "operator_gzip_bytes": sizes["operator-wire"],
        "operator_again_ms": round(statistics.median(again), 1),
        "tenant_ms": round(statistics.median(tenant), 1),
        "tenant_bytes": sizes["tenant"],
        "event_bytes": sizes["event"],
        "delta": delta,
    }


async def _events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[bytes, bytes, bytes]]:
    """The events of a stream, each as its name, its data and the whole event as sent."""
    buffer = b""
    async for chunk in resp.content.iter_any():
        buffer += chunk
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            if raw.startswith(b":"):
                continue  # a keepalive
            fields = dict(line.split(b": ", 1) for line in raw.split(b"\n"))
            yield fields[b"event"], fields[b"data"], raw + b"\n\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--leases", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
