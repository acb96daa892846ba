"""The reflector's watch stream (`watch_cache.Reflector.watch`) against an in-process API server
that writes watch events as the real one does: a Pod BOOKMARK, whose `spec.containers` is null,
moves the version on and ends nothing; an ERROR 410 asks for a relist (Gone); events arrive as
the API server's JSON, not re-encoded through a client model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from support.loopback_client import loopback_client
from support.loopback_server import loopback_server

from gpupool.adapters.kubernetes.watch_cache import TENANT_PODS, Gone, Reflector
from gpupool.state.objects import Change, ObjectStore


def pod(version: str, note: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": version,
                         "labels": {"gpupool.io/tenant": "a"}, "annotations": {"note": note}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {}}  # fmt: skip


BOOKMARK = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "30"},
            "spec": {"containers": None}, "status": {}}  # fmt: skip
GONE = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
        "message": "too old resource version: 5 (40)", "code": 410}  # fmt: skip


@asynccontextmanager
async def api(events: list[dict[str, Any]]) -> AsyncIterator[tuple[int, list[dict[str, str]]]]:
    """Serves one watch of Pods with `events`, then ends the stream; records each query."""
    queries: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        queries.append(dict(request.query))
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        for event in events:
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    async with loopback_server(handle, "/api/v1/pods") as port:
        yield port, queries


def reflector(port: int, changes: list[Change]) -> Reflector:
    found = Reflector(loopback_client(port), TENANT_PODS, ObjectStore("pods"), changes.append)
    found.version = "10"  # as after a list
    return found


def test_a_pod_bookmark_moves_the_version_and_ends_nothing() -> None:
    async def run() -> tuple[Reflector, list[Change], list[dict[str, str]]]:
        events = [
            {"type": "ADDED", "object": pod("20", "first")},
            {"type": "BOOKMARK", "object": BOOKMARK},
            {"type": "MODIFIED", "object": pod("31", "second")},
        ]
        changes: list[Change] = []
        async with api(events) as (port, queries):
            watcher = reflector(port, changes)
            await watcher.watch()  # returns when the server ends the stream
            await watcher.client.close()
        return watcher, changes, queries

    watcher, changes, queries = asyncio.run(run())
    [query] = queries
    assert query["watch"] == "true" and query["allowWatchBookmarks"] == "true"
    assert query["resourceVersion"] == "10" and query["labelSelector"] == "gpupool.io/tenant"
    assert [c.new["metadata"]["annotations"]["note"] for c in changes if c.new] == [
        "first",
        "second",
    ]
    assert watcher.version == "31"
    # the object is the API server's JSON as sent
    assert changes[-1].new == pod("31", "second")


@pytest.mark.parametrize("how", ["event", "answer"])
def test_an_expired_version_asks_for_a_relist(how: str) -> None:
    """410 as an ERROR event in the stream, or as the API server's answer to the watch request
    itself: the same Gone, so the kind is listed again rather than the watch retried forever."""

    async def refuse(request: web.Request) -> web.Response:
        # as the API server answers: the Status, typed exactly `application/json`
        body = json.dumps(GONE).encode()
        return web.Response(body=body, status=410, content_type="application/json")

    @asynccontextmanager
    async def server() -> AsyncIterator[int]:
        if how == "event":
            async with api([{"type": "ERROR", "object": GONE}]) as (port, _queries):
                yield port
        else:
            async with loopback_server(refuse, "/api/v1/pods") as port:
                yield port

    async def run() -> None:
        async with server() as port:
            watcher = reflector(port, [])
            try:
                await watcher.watch()
            finally:
                await watcher.client.close()

    with pytest.raises(Gone, match="too old resource version"):
        asyncio.run(run())


def test_a_list_reads_every_page_and_keeps_the_last_pages_version() -> None:
    """The reflector lists in pages (limit + continue, as client-go does) and decodes the items
    straight to dicts, giving each the kind and apiVersion a list leaves out."""
    queries: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        queries.append(dict(request.query))
        first = "continue" not in request.query
        items = [pod("7", "a"), pod("8", "b")] if first else [pod("9", "c")]
        for item in items:
            del item["kind"], item["apiVersion"]
            item["metadata"]["name"] = item["metadata"]["annotations"]["note"]
            item["metadata"]["uid"] = item["metadata"]["name"]
        meta = {"resourceVersion": "40", **({"continue": "next-page"} if first else {})}
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}
        return web.json_response(body)

    async def run() -> tuple[Reflector, list[Change]]:
        changes: list[Change] = []
        async with loopback_server(handle, "/api/v1/pods") as port:
            found = Reflector(
                loopback_client(port), TENANT_PODS, ObjectStore("pods"), changes.append
            )
            try:
                await found.list()
            finally:
                await found.client.close()
        return found, changes

    found, changes = asyncio.run(run())
    assert [q.get("continue") for q in queries] == [None, "next-page"]
    assert {q["limit"] for q in queries} == {"500"}
    assert {q["labelSelector"] for q in queries} == {"gpupool.io/tenant"}
    assert sorted(o["metadata"]["name"] for o in found.store.values()) == ["a", "b", "c"]
    assert {(o["kind"], o["apiVersion"]) for o in found.store.values()} == {("Pod", "v1")}
    assert found.version == "40" and found.synced.is_set()
    assert len(changes) == 3


def test_a_batched_watch_loses_no_event() -> None:
    """A kind read in batches (`Watched.batch_s`, the nodes' heartbeats) waits after an event
    that came alone, and still folds in every event, in order."""
    slow = replace(TENANT_PODS, batch_s=0.05)

    @asynccontextmanager
    async def trickle() -> AsyncIterator[int]:
        async def handle(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse()
            response.content_type = "application/json"
            await response.prepare(request)
            for n in range(1, 13):
                event = {"type": "MODIFIED", "object": pod(str(100 + n), f"v{n}")}
                await response.write(json.dumps(event).encode() + b"\n")
                if n % 4 == 0:  # some alone, some together
                    await asyncio.sleep(0.02)
            await response.write_eof()
            return response

        async with loopback_server(handle, "/api/v1/pods") as port:
            yield port

    async def run() -> tuple[Reflector, list[Change]]:
        changes: list[Change] = []
        async with trickle() as port:
            found = Reflector(loopback_client(port), slow, ObjectStore("pods"), changes.append)
            found.version = "100"
            await found.watch()
            await found.client.close()
        return found, changes

    found, changes = asyncio.run(run())
    notes = [c.new["metadata"]["annotations"]["note"] for c in changes if c.new]
    assert notes == [f"v{n}" for n in range(1, 13)]
    assert found.version == "112"
