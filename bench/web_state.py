"""The cost of the web view's state on a large pool; prints JSON.

    .venv/bin/python bench/web_state.py [--nodes 1000] [--leases 10000] [--repeat 5]

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
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "views"))

from pool_fixture import NOW, gpunode, lease

from gpupool.adapters.web.access import Access, Question, Viewer
from gpupool.adapters.web.server import make_app
from gpupool.adapters.web.source import StateSource
from gpupool.domain.units import GiB
from gpupool.quota.spec import TenantQuota
from gpupool.state.nodes import NodeObject
from gpupool.state.views.status import ViewInputs

TENANTS = [f"tenant-{i:02d}" for i in range(12)]


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
    return ViewInputs(
        nodes=[NodeObject(n) for n in names],
        gpunodes=[
            gpunode(n, 8, "Lost" if i % 250 == 3 else "Healthy") for i, n in enumerate(names)
        ],
        leases=out,
        quotas=[TenantQuota(t, nominal=4096 * GiB) for t in TENANTS],
    )


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

    async def read() -> ViewInputs:
        return inputs

    source = StateSource(read, lambda: NOW)
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
    await runner.cleanup()
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
    }


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
