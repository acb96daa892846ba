"""The autoscaler's utilisation sources over real HTTP: `AgentScrapeSource` scrapes the agents'
own series (the real collector over a fake inventory driven to a utilisation) and averages each
pod's cards; a node that does not answer leaves its pods out; `PrometheusSource` reads a query
answer (and the real Prometheus join is shown in tests/integration)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from support.fake_agents import FakeAgents

from gpupool.adapters.metrics.utilisation import (
    AgentScrapeSource,
    PrometheusSource,
    pod_utilisation_from_query,
)
from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.node.nvml.fake import FakeInventory, fake_uuid
from gpupool.ports import PodLease, PodPlace

GiB = 2**30


class Leases:
    def __init__(self, leases: tuple[PodLease, ...]) -> None:
        self.leases = leases

    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        return tuple(le for le in self.leases if le.node == node)

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        return None


def _cards(node: str, count: int) -> tuple[Gpu, ...]:
    return FakeInventory.from_spec(f"{count}xA100-80GB", node=node).devices()


def _lease(pod: str, node: str, *cards: int) -> PodLease:
    slices = tuple(Slice(i, fake_uuid(node, i), "A100-80GB", 0, 12 * GiB, 0) for i in cards)
    return PodLease(f"ns/{pod}-lease", f"ns/{pod}", f"uid-{pod}", node, slices)


def test_each_pod_gets_the_average_of_its_cards() -> None:
    async def run() -> dict[str, float]:
        leases = Leases((_lease("a", "n1", 0), _lease("b", "n1", 0, 1), _lease("c", "n2", 0)))
        agents = FakeAgents({"n1": _cards("n1", 2), "n2": _cards("n2", 1)}, leases)
        agents.set_utilisation(95.0)
        n1 = agents.inventories["n1"]
        n1.set_telemetry(fake_uuid("n1", 1), utilization_pct=15.0)
        url = await agents.start()
        try:
            async with aiohttp.ClientSession() as session:
                source = AgentScrapeSource(session, url)
                pods = [PodPlace("ns", p, n) for p, n in (("a", "n1"), ("b", "n1"), ("c", "n2"))]
                return dict(await source.pod_utilisation(pods))
        finally:
            await agents.stop()

    got = asyncio.run(run())
    assert got == pytest.approx({"ns/a": 95.0, "ns/b": 55.0, "ns/c": 95.0})


def test_a_node_that_does_not_answer_leaves_its_pods_out() -> None:
    async def run() -> dict[str, float]:
        agents = FakeAgents({"n1": _cards("n1", 1)}, Leases((_lease("a", "n1", 0),)))
        agents.set_utilisation(40.0)
        url = await agents.start()
        try:
            async with aiohttp.ClientSession() as session:
                source = AgentScrapeSource(session, url)
                pods = [PodPlace("ns", "a", "n1"), PodPlace("ns", "z", "gone")]
                return dict(await source.pod_utilisation(pods))
        finally:
            await agents.stop()

    assert asyncio.run(run()) == {"ns/a": 40.0}


def test_prometheus_answer_is_read_per_pod_and_an_error_gives_none() -> None:
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"namespace": "ns", "pod": "a"}, "value": [1.0, "0.95"]},
                {"metric": {"namespace": "ns", "pod": "b"}, "value": [1.0, "0.1"]},
            ],
        },
    }
    assert pod_utilisation_from_query(answer) == {"ns/a": 95.0, "ns/b": 10.0}

    async def run(body: dict[str, object], status: int) -> dict[str, float]:
        async def query(request: web.Request) -> web.Response:
            assert "gpupool_agent_card_utilization_ratio" in request.query["query"]
            return web.json_response(body, status=status)

        app = web.Application()
        app.router.add_get("/api/v1/query", query)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                source = PrometheusSource(session, f"http://127.0.0.1:{port}/")
                return dict(await source.pod_utilisation([PodPlace("ns", "a", "n1")]))
        finally:
            await runner.cleanup()

    assert asyncio.run(run(answer, 200)) == {"ns/a": 95.0}
    assert asyncio.run(run({"status": "error", "error": "bad query"}, 400)) == {}
