"""The agent's look for other paths, by watch: what it keeps is selected by field (its Node, the
ResourceSlices on its node, its GpuNode), on the LIST and on the WATCH request alike; it decides
again only on a change the decision reads (not a Node's status heartbeat, not the GpuNode's other
status), and writes the condition only when what it found differs from what the GpuNode says.

Against a small in-process API server (aiohttp) that records each request, serves a list per
kind and keeps each watch open, sending what the test pushes."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web
from support.loopback_client import loopback_client
from support.loopback_server import loopback_server

from gpupool.adapters.kubernetes.gpu_paths import (
    GPUNODE_KIND,
    NODE_KIND,
    SLICES_KIND,
    GpuPathWatch,
    matters,
    path_inputs,
    watched_for,
)
from gpupool.adapters.kubernetes.watch_cache import Watched
from gpupool.state.objects import Change

CARDS = ["GPU-n1-0", "GPU-n1-1"]
PATHS = {
    NODE_KIND: "/api/v1/nodes",
    SLICES_KIND: "/apis/resource.k8s.io/v1/resourceslices",
    GPUNODE_KIND: "/apis/gpupool.io/v1alpha1/gpunodes",
}


def node(extra: dict[str, str] | None = None, beat: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    resources = {"cpu": "96", "gpupool.io/vgpu": "20", **(extra or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "1"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": beat}],
        },
    }


def nvidia_slice(uuids: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpu.nvidia.com-abcde", "resourceVersion": "1"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}}}
                for i, u in enumerate(uuids)
            ],
        },
    }


def gpunode(
    conditions: list[dict[str, Any]] | None = None, health: str = "Healthy"
) -> dict[str, Any]:
    return {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuNode",
        "metadata": {"name": "n1", "resourceVersion": "1"},
        "spec": {},
        "status": {"health": health, "conditions": conditions or []},
    }


# --- the pure filter -----------------------------------------------------------------------


def test_a_nodes_heartbeat_or_cpu_does_not_matter_its_extended_resources_do() -> None:
    old = node()
    assert not matters(Change(NODE_KIND, "n1", old, node(beat="2026-01-01T00:00:10Z")))
    busier = node()
    busier["status"]["allocatable"]["cpu"] = "90"  # what pods took: no GPU path
    assert not matters(Change(NODE_KIND, "n1", old, busier))
    assert matters(Change(NODE_KIND, "n1", old, node({"nvidia.com/gpu": "8"})))
    assert matters(
        Change(NODE_KIND, "n1", node({"nvidia.com/gpu": "8"}), node({"nvidia.com/gpu": "0"}))
    )
    assert matters(Change(NODE_KIND, "n1", None, old))  # the first list
    assert matters(Change(NODE_KIND, "n1", old, None))  # gone


def test_a_slices_devices_or_driver_matter_its_bookkeeping_does_not() -> None:
    old = nvidia_slice(CARDS)
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"x": "y"}
    relabelled["metadata"]["resourceVersion"] = "2"
    assert not matters(Change(SLICES_KIND, "s", old, relabelled))
    assert matters(Change(SLICES_KIND, "s", old, nvidia_slice(CARDS[:1])))
    other = copy.deepcopy(old)
    other["spec"]["driver"] = "gpu.example.com"
    assert matters(Change(SLICES_KIND, "s", old, other))
    assert matters(Change(SLICES_KIND, "s", None, old))
    assert matters(Change(SLICES_KIND, "s", old, None))


def test_only_the_gpunodes_other_gpu_path_condition_matters() -> None:
    said = {"type": "OtherGpuPath", "status": "False", "reason": "OnlyGpupool", "message": "m"}
    beat = {"type": "Heartbeat", "status": "True", "reason": "Fresh"}
    old = gpunode([said])
    assert not matters(Change(GPUNODE_KIND, "n1", old, gpunode([said, beat], health="Suspect")))
    edited = gpunode([{**said, "status": "True"}])
    assert matters(Change(GPUNODE_KIND, "n1", old, edited))
    assert matters(Change(GPUNODE_KIND, "n1", old, gpunode([])))  # someone removed it
    assert path_inputs(GPUNODE_KIND, gpunode([])) is None


def test_what_an_agent_keeps_is_selected_by_field_for_its_node_alone() -> None:
    scopes = {w.kind: w.scope() for w in watched_for("n1")}
    assert scopes == {
        NODE_KIND: {"fields": {"metadata.name": "n1"}},
        SLICES_KIND: {"fields": {"spec.nodeName": "n1"}},
        GPUNODE_KIND: {"fields": {"metadata.name": "n1"}},
    }
    assert Watched("x", object, True, {"a": "b"}).scope() == {
        "namespace": "*",
        "labels": {"a": "b"},
    }


# --- against an API server -------------------------------------------------------------------


class Api:
    """Lists per kind; each watch is kept open and sends what `push` queues for its kind."""

    def __init__(self) -> None:
        self.objects = {NODE_KIND: [node()], SLICES_KIND: [], GPUNODE_KIND: [gpunode()]}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []  # method, path, query
        self.watches: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self.watching = asyncio.Event()
        self.patches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.version = 10
        self.conflicts = 0  # the next PATCHes answered 409, as for a stale resourceVersion

    def push(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.watches[kind].put_nowait({"type": event, "object": obj})

    def gets(self) -> list[tuple[str, dict[str, list[str]]]]:
        return [(path, query) for method, path, query in self.requests if method == "GET"]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = parse_qs(urlsplit(str(request.url)).query)
        self.requests.append((request.method, request.path, query))
        if request.method == "PATCH":
            if self.conflicts:
                self.conflicts -= 1
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": "Conflict", "code": 409, "message": "changed"}  # fmt: skip
                # lightkube reads an error as the API server's only under exactly this type
                json_type = {"Content-Type": "application/json"}
                return web.Response(body=json.dumps(status).encode(), status=409, headers=json_type)
            self.patches.append(await request.json())
            return web.json_response({**gpunode(), **(await request.json())})
        if request.method == "POST":
            self.events.append(await request.json())
            return web.json_response(await request.json())
        kind = next(k for k, p in PATHS.items() if request.path == p)
        if "watch" not in query:
            listing = {"apiVersion": "v1", "kind": "List",
                       "metadata": {"resourceVersion": str(self.version)},
                       "items": self.objects[kind]}  # fmt: skip
            return web.json_response(listing)
        queue = self.watches.setdefault(kind, asyncio.Queue())
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        if len(self.watches) == len(PATHS):
            self.watching.set()
        while True:
            await response.write(json.dumps(await queue.get()).encode() + b"\n")


async def serve(api: Api) -> AsyncIterator[int]:
    async with loopback_server(api.handle) as port:
        yield port


def client_for(port: int) -> Any:
    return loopback_client(port)


async def settle() -> None:
    for _ in range(50):  # let the watch streams deliver what was pushed
        await asyncio.sleep(0.01)


def test_the_look_lists_and_watches_by_field_and_decides_again_only_on_a_change_that_matters() -> (
    None
):
    async def run() -> None:
        api = Api()
        served = serve(api)
        port = await served.__anext__()
        client = client_for(port)
        look = GpuPathWatch(client, "n1")
        stop = asyncio.Event()
        keeping = asyncio.create_task(look.run(stop))
        try:
            await asyncio.wait_for(look.changed(), timeout=10)
            await asyncio.wait_for(api.watching.wait(), timeout=10)
            # each kind listed once and watched, with its field selector on both requests
            selectors = {
                (path, "watch" in query): query.get("fieldSelector") for path, query in api.gets()
            }
            fields = {NODE_KIND: "metadata.name=n1", SLICES_KIND: "spec.nodeName=n1",
                      GPUNODE_KIND: "metadata.name=n1"}  # fmt: skip
            for kind, field in fields.items():
                assert selectors[(PATHS[kind], False)] == [field]
                assert selectors[(PATHS[kind], True)] == [field]
            assert len(api.gets()) == 6
            assert all(
                q.get("allowWatchBookmarks") == ["true"] for _, q in api.gets() if "watch" in q
            )

            found = await look.check(CARDS, "2026-01-01T00:00:00Z")
            assert found is not None and not found.refused
            assert len(api.patches) == 1  # the GpuNode said nothing yet: it says OnlyGpupool
            said = api.patches[0]["status"]["conditions"][0]
            assert (said["status"], said["reason"]) == ("False", "OnlyGpupool")
            api.push(GPUNODE_KIND, "MODIFIED", gpunode([said]))  # our own write, come back
            await settle()
            await asyncio.wait_for(look.changed(), timeout=10)
            await look.check(CARDS, "2026-01-01T00:00:01Z")  # the same finding: no write
            assert len(api.patches) == 1

            # heartbeats of the Node and other GpuNode status: nothing is due
            api.push(NODE_KIND, "MODIFIED", node(beat="2026-01-01T00:00:10Z"))
            api.push(GPUNODE_KIND, "MODIFIED", gpunode([said], health="Suspect"))
            await settle()
            assert not look._wake.is_set()

            # another DRA driver's slice naming a card: due, refused, written, an Event
            api.push(SLICES_KIND, "ADDED", nvidia_slice(CARDS))
            await asyncio.wait_for(look.changed(), timeout=10)
            found = await look.check(CARDS, "2026-01-01T00:00:02Z")
            assert found is not None and found.refused
            assert api.patches[-1]["status"]["conditions"][0]["reason"] == "OtherDraDriver"
            assert [e["reason"] for e in api.events] == ["OtherGpuPath"]
            # nothing was listed again, the Node was never read by GET
            assert len(api.gets()) == 6
        finally:
            stop.set()
            keeping.cancel()
            await client.close()
            await served.aclose()

    asyncio.run(run())


def test_a_write_that_met_a_newer_gpunode_is_tried_again_at_its_next_change() -> None:
    async def run() -> None:
        api = Api()
        api.conflicts = 1
        served = serve(api)
        client = client_for(await served.__anext__())
        look = GpuPathWatch(client, "n1")
        stop = asyncio.Event()
        keeping = asyncio.create_task(look.run(stop))
        try:
            await asyncio.wait_for(look.changed(), timeout=10)
            await asyncio.wait_for(api.watching.wait(), timeout=10)
            await look.check(CARDS, "2026-01-01T00:00:00Z")
            assert api.patches == []  # 409: nothing written
            # the newer GpuNode arrives; what changed there does not matter by itself, but the
            # look is due again, and this time it writes
            api.push(GPUNODE_KIND, "MODIFIED", gpunode(health="Suspect"))
            await asyncio.wait_for(look.changed(), timeout=10)
            await look.check(CARDS, "2026-01-01T00:00:01Z")
            assert [p["status"]["conditions"][0]["reason"] for p in api.patches] == ["OnlyGpupool"]
        finally:
            stop.set()
            keeping.cancel()
            await client.close()
            await served.aclose()

    asyncio.run(run())
