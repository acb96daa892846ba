"""The extender's informer against an in-process API server that lists and streams watch events
as the real one does: a watch the server ends, or whose connection breaks, is resumed from the
last version it saw (a bookmark's too) without listing anything again; a watch whose version is
gone (410) has everything listed again; an event that cannot be read is left out alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from support.loopback_client import loopback_client
from support.loopback_server import loopback_server

from gpupool.adapters.extender_http.informer import Informer
from gpupool.adapters.kubernetes import watch_cache
from gpupool.state.cluster import ClusterCache

LIST_VERSION = "10"
GONE = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
        "message": "too old resource version: 10 (40)", "code": 410}  # fmt: skip

# the path of each kind's list and watch, and what its list is called
KINDS = {
    "/api/v1/nodes": "NodeList",
    "/apis/gpupool.io/v1alpha1/gpunodes": "GpuNodeList",
    "/apis/gpupool.io/v1alpha1/gpuleases": "GpuLeaseList",
    "/api/v1/pods": "PodList",
}
NODES = "/api/v1/nodes"
LEASES = "/apis/gpupool.io/v1alpha1/gpuleases"


def node(name: str, version: str, zone: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": version, "labels": {"zone": zone}},
            "spec": {}, "status": {}}  # fmt: skip


def bookmark(version: str) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": version}}


# What one watch call of a kind does: write these events, then end the stream ("end"), break
# the connection ("break") or stay open until the test ends ("hold").
Script = tuple[list[dict[str, Any]], str]


@dataclass
class Api:
    """Scripted watch calls per path (after the script, a watch stays open with no events);
    every request's query, by path."""

    watches: dict[str, list[Script]]
    queries: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    def lists(self, path: str) -> int:
        return sum(1 for q in self.queries.get(path, []) if q.get("watch") != "true")

    def watch_versions(self, path: str) -> list[str | None]:
        return [q.get("resourceVersion") for q in self.queries.get(path, []) if q.get("watch")]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.queries.setdefault(path, []).append(dict(request.query))
        if request.query.get("watch") != "true":
            # each list of a kind a later version: "10", then "20", ...
            version = str(int(LIST_VERSION) * self.lists(path))
            body = {"kind": KINDS[path], "apiVersion": "v1",
                    "metadata": {"resourceVersion": version}, "items": []}  # fmt: skip
            return web.json_response(body)
        script = self.watches.get(path) or []
        events, then = script.pop(0) if script else ([], "hold")
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        for event in events:
            await response.write(json.dumps(event).encode() + b"\n")
        if then == "break":
            assert request.transport is not None
            request.transport.abort()
            return response
        if then == "hold":
            await asyncio.Event().wait()
        await response.write_eof()
        return response


@dataclass
class Heard:
    """The informer's WatchObserver: what it reported, in order."""

    restarts: list[str] = field(default_factory=list)
    relists: list[str] = field(default_factory=list)

    def watch_restarted(self, kind: str) -> None:
        self.restarts.append(kind)

    def relisted(self, kind: str) -> None:
        self.relists.append(kind)


@asynccontextmanager
async def running(api: Api) -> AsyncIterator[tuple[Informer, Heard]]:
    heard = Heard()
    async with loopback_server(api.handle) as port:
        found = Informer(loopback_client(port), ClusterCache(), observer=heard)
        stop = asyncio.Event()
        task = asyncio.ensure_future(found.run(stop))
        try:
            yield found, heard
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)
            await found.client.close()


async def until(what: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Waits for `what` to hold (a condition, not a fixed time)."""
    async with asyncio.timeout(timeout_s):
        while not what():
            await asyncio.sleep(0.01)


async def once_it_has(api: Api, node_name: str) -> tuple[Informer, Heard]:
    """The informer and what it reported, once its cache holds the node `node_name`."""
    async with running(api) as (found, heard):
        await until(lambda: node_name in found.cache.nodes)
        return found, heard


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_cache, "RETRY_S", (0.01,))


def test_an_ended_or_broken_watch_resumes_from_its_last_version_and_lists_nothing() -> None:
    api = Api(
        watches={
            NODES: [
                (
                    [
                        {"type": "ADDED", "object": node("n1", "11", "a")},
                        {"type": "BOOKMARK", "object": bookmark("15")},
                    ],
                    "end",
                ),
                ([{"type": "MODIFIED", "object": node("n1", "16", "b")}], "break"),
                ([{"type": "ADDED", "object": node("n2", "17", "c")}], "hold"),
            ]
        }
    )

    found, heard = asyncio.run(once_it_has(api, "n2"))
    # each version the stream gave, in turn: the list's, the bookmark's, the last event's
    assert api.watch_versions(NODES) == [LIST_VERSION, "15", "16"]
    assert {path: api.lists(path) for path in KINDS} == dict.fromkeys(KINDS, 1)
    assert found.cache.nodes["n1"].labels == {"zone": "b"}
    assert heard.restarts == ["nodes"] and heard.relists == []
    assert {q["allowWatchBookmarks"] for q in api.queries[NODES] if q.get("watch")} == {"true"}


def test_a_version_gone_lists_everything_again() -> None:
    api = Api(watches={LEASES: [([{"type": "ERROR", "object": GONE}], "hold")]})

    async def run() -> Heard:
        async with running(api) as (_found, heard):
            await until(lambda: all(api.lists(path) == 2 for path in KINDS))
            await until(lambda: len(api.watch_versions(LEASES)) == 2)
            return heard

    heard = asyncio.run(run())
    assert heard.relists == ["gpuleases"] and heard.restarts == []
    # the new watch starts from the new list's version, not the gone one's
    assert api.watch_versions(LEASES) == [LIST_VERSION, "20"]


def test_an_unreadable_event_is_left_out_and_the_watch_goes_on() -> None:
    nameless = node("", "12", "x")
    api = Api(
        watches={
            NODES: [
                (
                    [
                        {"type": "ADDED", "object": nameless},
                        {"type": "ADDED", "object": node("n3", "13", "d")},
                    ],
                    "hold",
                ),
            ]
        }
    )

    found, heard = asyncio.run(once_it_has(api, "n3"))
    assert set(found.cache.nodes) == {"n3"}
    assert heard.restarts == [] and heard.relists == []
    assert found.streams["nodes"].version == "13"
