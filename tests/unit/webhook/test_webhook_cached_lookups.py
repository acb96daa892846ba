"""The webhook reads GpuNodes and GpuQuotas from its watch cache once the first list is in
(`KubeLookups(client, cache)`): a burst of pods costs the API server no LIST per pod, a changed
GpuNode is seen at once, and before the list is in the webhook reads the API server as before.
The lists go over a real socket to a stand-in API server that counts them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from support.loopback_client import loopback_client

from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.adapters.webhook.lookups import WEBHOOK_KINDS, KubeLookups
from gpupool.state.objects import Event

GiB = 1 << 30
QUOTA = {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuQuota",
         "metadata": {"name": "team-b", "resourceVersion": "3"},
         "spec": {"nominal": "48Gi", "leaseTTLSeconds": 600}}  # fmt: skip


def gpunode(name: str, model: str, version: str) -> dict[str, Any]:
    device = {"index": 0, "model": model, "uuid": f"GPU-{name}-0",
              "memoryBytes": 80 * GiB, "allocatableBytes": 72 * GiB}  # fmt: skip
    return {"apiVersion": "gpupool.io/v1alpha1", "kind": "GpuNode",
            "metadata": {"name": name, "resourceVersion": version},
            "status": {"health": "Healthy", "devices": [device]}}  # fmt: skip


async def _api() -> tuple[asyncio.Server, list[str]]:
    """Answers a LIST of GpuNodes or GpuQuotas (one of each object) and records each path."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ")[1]
        seen.append(path)
        kind, items = (
            ("GpuNodeList", [gpunode("n1", "A100-80GB", "5")])
            if "gpunodes" in path
            else ("GpuQuotaList", [QUOTA])
        )
        listing = {"kind": kind, "apiVersion": "gpupool.io/v1alpha1",
                   "metadata": {"resourceVersion": "7"}, "items": items}  # fmt: skip
        body = json.dumps(listing).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


def _client(port: int) -> Any:
    return loopback_client(port)


def test_cards_and_quotas_come_from_the_cache_once_listed_and_follow_its_changes() -> None:
    async def run() -> None:
        server, seen = await _api()
        client = _client(server.sockets[0].getsockname()[1])
        cache = WatchCache(client, WEBHOOK_KINDS)
        lookups = KubeLookups(client, cache)
        try:
            # before the cache's first list: the API server is read
            assert [c.model for c in await lookups.cards()] == ["A100-80GB"]
            assert len(seen) == 1
            for reflector in cache.reflectors.values():
                await reflector.list()  # what the cache's run does first
            listed = len(seen)
            for _ in range(20):  # a burst of pods
                cards = await lookups.cards()
                assert [q.name for q in await lookups.quotas()] == ["team-b"]
                assert await lookups.lease_ttl("team-b") == 600.0
                assert await lookups.lease_ttl("team-x") is None
            assert len(seen) == listed  # no request for any of them
            assert [(c.model, c.allocatable_bytes, c.total_bytes) for c in cards] == [
                ("A100-80GB", 72 * GiB, 80 * GiB)
            ]
            # a watch event changes the node's card (the model as the catalogue names it)
            store = cache.stores["gpunodes"]
            store.apply(Event.MODIFIED, gpunode("n1", "H100-80GB", "6"))
            store.apply(Event.ADDED, gpunode("n2", "A100-80GB", "8"))
            assert sorted(c.model for c in await lookups.cards()) == ["A100-80GB", "H100"]
            store.apply(Event.DELETED, gpunode("n2", "A100-80GB", "9"))
            assert [c.model for c in await lookups.cards()] == ["H100"]
            assert len(seen) == listed
        finally:
            await client.close()
            server.close()

    asyncio.run(run())
