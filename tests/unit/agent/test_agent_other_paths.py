"""The agent's look for other paths: each time the checker (our GpuPathChecker interface, a
recording fake here) says something it reads changed, the agent hands it its cards and keeps the
last finding, and only then; /metrics shows it: 1 and each other path's devices when refused, 0
when gpupool alone serves the node, nothing before the first look."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.adapters.metrics.agent import AgentCollector, AgentReading, path_metrics
from gpupool.domain.gpu_paths import PathFinding, PublishedSlice, find_paths
from gpupool.node.agent import NodeAgent
from gpupool.node.device_plugin.server import DevicePluginServer, PluginConfig
from gpupool.node.device_plugin.sources import UnwiredAllocationSource
from gpupool.node.nvml import FakeInventory
from gpupool.ports import NodeReport


def refused_finding() -> PathFinding:
    theirs = PublishedSlice("n1-gpu.nvidia.com", "gpu.nvidia.com", 2, frozenset({"GPU-x"}))
    return find_paths("n1", {"gpupool.io/vgpu": 20, "nvidia.com/gpu": 8}, (theirs,),
                      own_resources=("gpupool.io/vgpu",), own_driver="gpu.gpupool.io",
                      gpu_resource_prefixes=("nvidia.com/",), card_uuids=("GPU-x",))  # fmt: skip


class Checker:
    """A GpuPathChecker that records the cards it was handed and answers a set finding; a test
    says when something changed (`change`)."""

    def __init__(self, finding: PathFinding | None) -> None:
        self.finding = finding
        self.asked: list[tuple[str, ...]] = []
        self.looked = asyncio.Event()
        self.due = asyncio.Event()
        self.running = False

    def change(self) -> None:
        self.due.set()

    async def run(self, stop: asyncio.Event) -> None:
        self.running = True
        await stop.wait()

    async def changed(self) -> None:
        await self.due.wait()

    async def check(self, card_uuids: Collection[str], stamp: str) -> PathFinding | None:
        self.due.clear()
        self.asked.append(tuple(card_uuids))
        self.looked.set()
        return self.finding


class Reporter:
    async def publish(self, report: NodeReport) -> None:
        return None

    async def renew(self, node: str) -> None:
        return None


def test_the_agent_looks_with_the_nodes_cards_on_each_change_and_only_then(
    tmp_path: Path,
) -> None:
    inventory = FakeInventory.from_spec("2xA100-80GB", node="n1")
    plugin = DevicePluginServer(
        PluginConfig(node="n1", plugin_dir=tmp_path), inventory, UnwiredAllocationSource()
    )
    checker = Checker(refused_finding())
    agent = NodeAgent(node="n1", plugin=plugin, reporter=Reporter(), reserve_pct=10.0,
                      paths=checker, heartbeat_s=0.01)  # fmt: skip
    cards = tuple(g.uuid for g in inventory.devices())

    async def follow() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(agent._follow_paths(stop))
        heartbeat = asyncio.create_task(agent._heartbeat(stop))
        for _ in range(20):  # many heartbeats and no change: no look
            await asyncio.sleep(0.01)
        assert checker.running and checker.asked == []
        checker.change()
        await asyncio.wait_for(checker.looked.wait(), timeout=10)
        checker.looked.clear()
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert checker.asked == [cards]
        checker.change()
        await asyncio.wait_for(checker.looked.wait(), timeout=10)
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, heartbeat), timeout=10)

    asyncio.run(follow())
    assert checker.asked == [cards, cards]
    assert agent.paths_found is checker.finding


def samples(finding: PathFinding | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    collector = AgentCollector("n1")
    collector.update(AgentReading("n1", (), (), None, {}, finding))
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_show_the_other_paths_and_the_refusal() -> None:
    got = samples(refused_finding())
    assert got[("gpupool_agent_other_gpu_path", (("Hostname", "n1"),))] == 1.0
    plugin = (("Hostname", "n1"), ("kind", "device-plugin"), ("path", "nvidia.com/gpu"))
    driver = (("Hostname", "n1"), ("kind", "dra-driver"), ("path", "gpu.nvidia.com"))
    assert got[("gpupool_agent_other_gpu_path_devices", plugin)] == 8.0
    assert got[("gpupool_agent_other_gpu_path_devices", driver)] == 2.0


def test_metrics_show_zero_when_gpupool_alone_serves_the_node_and_nothing_before_a_look() -> None:
    alone = find_paths(
        "n1",
        {"gpupool.io/vgpu": 20},
        (),
        own_resources=("gpupool.io/vgpu",),
        own_driver="gpu.gpupool.io",
        gpu_resource_prefixes=("nvidia.com/",),
    )
    got = samples(alone)
    assert got[("gpupool_agent_other_gpu_path", (("Hostname", "n1"),))] == 0.0
    assert not any(name == "gpupool_agent_other_gpu_path_devices" for name, _ in got)
    assert path_metrics("n1", None) == []
    assert not any(name.startswith("gpupool_agent_other_gpu_path") for name, _ in samples(None))
