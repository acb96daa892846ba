"""The agent's /metrics over real HTTP: every card series from what the fake inventory was told,
the lease series from the node's leases, and what a scrape shows when the lease source is down."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gpupool.adapters.metrics.agent import AgentCollector, AgentReading
from gpupool.adapters.metrics.http import start_metrics_server
from gpupool.cli.agent import metrics_refresher
from gpupool.domain.allocations import Slice
from gpupool.node.device_plugin.decide import allocation_key
from gpupool.node.limiter_usage import usage_file
from gpupool.node.nvml import FakeInventory
from gpupool.ports import LeaseSourceUnavailable, PodLease

GiB = 2**30
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Leases:
    """An AllocationSource (our interface) holding the leases a test puts on the node."""

    def __init__(self, leases: tuple[PodLease, ...] = (), *, down: bool = False) -> None:
        self.leases = leases
        self.down = down

    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        if self.down:
            raise LeaseSourceUnavailable("API server unreachable")
        return tuple(le for le in self.leases if le.node == node)

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        return None


async def _scrape(refresh: Callable[[], Awaitable[None]], collector: AgentCollector) -> Samples:
    registry = CollectorRegistry()
    registry.register(collector)
    runner = await start_metrics_server(registry, "127.0.0.1", 0, refresh=refresh)
    assert runner is not None
    try:
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200
            text = await resp.text()
    finally:
        await runner.cleanup()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _card(uuid: str, index: int, model: str = "A100-80GB") -> frozenset[tuple[str, str]]:
    return frozenset(
        {"Hostname": "n1", "gpu": str(index), "UUID": uuid, "modelName": model}.items()
    )


def _lease(inv: FakeInventory, pod: str, gib: int, card: int, compute: int = 0) -> PodLease:
    gpu = inv.devices()[card]
    piece = Slice(gpu.index, gpu.uuid, gpu.model, 0, gib * GiB, compute)
    return PodLease(f"ns/uid-{pod}", f"ns/{pod}", f"uid-{pod}", "n1", (piece,))


def test_every_card_series_shows_what_the_card_reports() -> None:
    inv = FakeInventory.from_spec("2xA100-80GB", node="n1")
    a, b = (g.uuid for g in inv.devices())
    inv.set_telemetry(
        a, utilization_pct=75, memory_used_bytes=20 * GiB, temperature_c=88, power_w=310,
        ecc_uncorrected=2,
    )  # fmt: skip
    inv.record_xid(b, 13, fatal=False)
    inv.record_xid(b, 79, fatal=True)
    leases = Leases((_lease(inv, "p1", 12, 0, 300), _lease(inv, "p2", 8, 0)))
    collector = AgentCollector("n1")
    samples = asyncio.run(_scrape(metrics_refresher("n1", inv, leases, collector), collector))

    ca, cb = _card(a, 0), _card(b, 1)
    assert samples[("gpupool_agent_card_utilization_ratio", ca)] == 0.75
    assert samples[("gpupool_agent_card_memory_used_bytes", ca)] == 20 * GiB
    assert samples[("gpupool_agent_card_memory_total_bytes", ca)] == 80 * GiB
    assert samples[("gpupool_agent_card_temperature_celsius", ca)] == 88
    assert samples[("gpupool_agent_card_power_watts", ca)] == 310
    assert samples[("gpupool_agent_card_ecc_uncorrected_errors_total", ca)] == 2
    assert samples[("gpupool_agent_card_xid_events_total", ca)] == 0
    assert samples[("gpupool_agent_card_xid_events_total", cb)] == 2
    assert samples[("gpupool_agent_card_healthy", ca)] == 1
    assert samples[("gpupool_agent_card_healthy", cb)] == 0  # the fatal XID
    assert samples[("gpupool_agent_card_allocated_bytes", ca)] == 20 * GiB
    assert samples[("gpupool_agent_card_allocated_bytes", cb)] == 0
    p1 = frozenset(
        {"Hostname": "n1", "gpu": "0", "UUID": a, "namespace": "ns", "pod": "p1",
         "lease": "ns/uid-p1"}.items()
    )  # fmt: skip
    assert samples[("gpupool_agent_lease_memory_allocated_bytes", p1)] == 12 * GiB
    assert samples[("gpupool_agent_lease_compute_ratio", p1)] == 0.3
    assert samples[("gpupool_agent_lease_source_up", frozenset({("Hostname", "n1")}))] == 1


def test_with_the_lease_source_down_the_cards_still_show_and_no_lease_series_is_made_up() -> None:
    inv = FakeInventory.from_spec("1xT4", node="n1")
    collector = AgentCollector("n1")
    refresh = metrics_refresher("n1", inv, Leases(down=True), collector)
    samples = asyncio.run(_scrape(refresh, collector))
    names = {name for name, _ in samples}
    assert ("gpupool_agent_lease_source_up", frozenset({("Hostname", "n1")})) in samples
    assert samples[("gpupool_agent_lease_source_up", frozenset({("Hostname", "n1")}))] == 0
    assert "gpupool_agent_card_temperature_celsius" in names
    assert "gpupool_agent_card_allocated_bytes" not in names
    assert "gpupool_agent_lease_memory_allocated_bytes" not in names


def test_a_reading_the_board_cannot_give_is_left_out_not_zero() -> None:
    inv = FakeInventory.from_spec("1xT4", node="n1")
    (gpu,) = inv.devices()
    no_power = replace(inv.telemetry()[0], power_w=None)
    collector = AgentCollector("n1")

    async def refresh() -> None:
        collector.update(AgentReading("n1", inv.devices(), (no_power,), ()))

    samples = asyncio.run(_scrape(refresh, collector))
    names = {name for name, _ in samples}
    assert "gpupool_agent_card_power_watts" not in names
    assert samples[("gpupool_agent_card_temperature_celsius", _card(gpu.uuid, 0, "T4"))] == 30


def test_a_lease_without_a_readable_usage_file_has_no_used_series(tmp_path: Path) -> None:
    # The limiter's file written by the real limiter is read in
    # tests/integration/test_device_plugin_limiter.py; here the two ways it is not there: no CUDA
    # call yet (no file), and a file of another layout (logged, left out, the scrape answers).
    inv = FakeInventory.from_spec("1xT4", node="n1")
    fresh = replace(_lease(inv, "fresh", 4, 0), device_ids=("d::0",))
    foreign = replace(_lease(inv, "foreign", 4, 0), device_ids=("d::1",))
    bad = usage_file(tmp_path, allocation_key(foreign.device_ids))
    bad.parent.mkdir()
    bad.write_bytes(b"\x01" * 4096)
    collector = AgentCollector("n1")
    refresh = metrics_refresher("n1", inv, Leases((fresh, foreign)), collector, tmp_path)
    samples = asyncio.run(_scrape(refresh, collector))
    names = {name for name, _ in samples}
    assert "gpupool_agent_lease_memory_allocated_bytes" in names
    assert "gpupool_agent_lease_memory_used_bytes" not in names
    assert "gpupool_agent_lease_last_activity_timestamp_seconds" not in names
