"""The autoscaler's Prometheus source against Debian's real Prometheus: it scrapes two nodes'
agent /metrics (the agent's own collector over fake inventories driven to 95% and 15%), and
`PrometheusSource`'s PromQL join gives each pod the average of its cards, the same figures
`AgentScrapeSource` reads from the agents directly."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
import yaml
from support.fake_agents import FakeAgents
from support.waiting import wait_until_async

from gpupool.adapters.metrics.utilisation import AgentScrapeSource, PrometheusSource
from gpupool.devcluster.ports import free_port
from gpupool.domain.allocations import Slice
from gpupool.node.nvml.fake import FakeInventory, fake_uuid
from gpupool.ports import PodLease, PodPlace

GiB = 2**30
PROMETHEUS = shutil.which("prometheus")


class Leases:
    def __init__(self, leases: tuple[PodLease, ...]) -> None:
        self.leases = leases

    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        return tuple(le for le in self.leases if le.node == node)

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        return None


def _lease(pod: str, node: str, *cards: int) -> PodLease:
    slices = tuple(Slice(i, fake_uuid(node, i), "A100-80GB", 0, 12 * GiB, 0) for i in cards)
    return PodLease(f"ns/{pod}-lease", f"ns/{pod}", f"uid-{pod}", node, slices)


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed")
def test_the_prometheus_join_gives_each_pod_its_cards_average(tmp_path: Path) -> None:
    async def run() -> tuple[dict[str, float], dict[str, float]]:
        cards = {n: FakeInventory.from_spec("2xA100-80GB", node=n).devices() for n in ("n1", "n2")}
        leases = Leases((_lease("a", "n1", 0), _lease("b", "n1", 0, 1), _lease("c", "n2", 1)))
        agents = FakeAgents(cards, leases)
        agents.set_utilisation(95.0)
        agents.inventories["n1"].set_telemetry(fake_uuid("n1", 1), utilization_pct=15.0)
        template = await agents.start()
        base = template.split("/{node}")[0].removeprefix("http://")
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": f"gpupool-agent-{node}",
                    "metrics_path": f"/{node}/metrics",
                    "static_configs": [{"targets": [base]}],
                }
                for node in cards
            ],
        }
        (tmp_path / "prometheus.yaml").write_text(yaml.safe_dump(config))
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yaml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        pods = [PodPlace("ns", p, n) for p, n in (("a", "n1"), ("b", "n1"), ("c", "n2"))]
        latest: dict[str, float] = {}
        try:
            async with aiohttp.ClientSession() as session:
                source = PrometheusSource(session, f"http://127.0.0.1:{port}")

                async def poll() -> None:
                    while True:
                        latest.update(await source.pod_utilisation(pods))
                        await asyncio.sleep(0.5)

                poller = asyncio.create_task(poll())
                try:
                    await wait_until_async(
                        lambda: len(latest) == 3,
                        timeout_s=90,
                        what=lambda: (
                            f"3 pods' figures from Prometheus, got {latest}; log: "
                            f"{(tmp_path / 'prometheus.log').read_text()[-1500:]}"
                        ),
                        interval_s=0.2,
                    )
                finally:
                    poller.cancel()
                direct = dict(await AgentScrapeSource(session, template).pod_utilisation(pods))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
            await agents.stop()
        return dict(latest), direct

    through_prometheus, direct = asyncio.run(run())
    expected = {"ns/a": 95.0, "ns/b": 55.0, "ns/c": 95.0}
    assert through_prometheus == pytest.approx(expected)
    assert direct == pytest.approx(expected)
