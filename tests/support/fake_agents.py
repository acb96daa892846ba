"""The node agents' /metrics for nodes whose GPUs are faked, driven to a chosen utilisation:
for each node the real agent collector and refresher (`gpupool agent`'s own
`metrics_refresher`) over a `FakeInventory` whose cards a test sets to any utilisation, and a
lease source of our interface (the agent's real `KubernetesAllocationSource` in the e2e).

One aiohttp server serves every node at `/<node>/metrics`, so the controller's
`--autoscale-agent-url http://127.0.0.1:PORT/{node}/metrics` reaches each node's "agent".
Each scrape is counted (`scrapes`), so a test can wait for the controller to have read a
utilisation it set.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupool.adapters.metrics.agent import AgentCollector
from gpupool.adapters.metrics.http import metrics_app
from gpupool.cli.agent import metrics_refresher
from gpupool.domain.devices import Gpu
from gpupool.node.nvml import FakeInventory
from gpupool.ports import AllocationSource


class FakeAgents:
    def __init__(self, nodes: Mapping[str, Sequence[Gpu]], leases: AllocationSource) -> None:
        """`nodes`: node name -> its cards (their uuids as the node's GpuLeases name them)."""
        self.inventories = {n: FakeInventory(gpus) for n, gpus in nodes.items()}
        self.leases = leases
        self.scrapes = 0
        self.utilisation_pct = 0.0
        self._runner: web.AppRunner | None = None

    def set_utilisation(self, pct: float) -> None:
        """Every card of every node reports `pct` from the next scrape on."""
        self.utilisation_pct = pct
        for inventory in self.inventories.values():
            for gpu in inventory.devices():
                inventory.set_telemetry(gpu.uuid, utilization_pct=pct)

    def _app(self) -> web.Application:
        root = web.Application()
        for node, inventory in self.inventories.items():
            collector = AgentCollector(node)
            registry = CollectorRegistry()
            registry.register(collector)
            refresh = metrics_refresher(node, inventory, self.leases, collector)
            root.add_subapp(f"/{node}/", metrics_app(registry, self._counted(refresh)))
        return root

    def _counted(self, refresh: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def counted() -> None:
            self.scrapes += 1
            await refresh()

        return counted

    async def start(self) -> str:
        """Serve on a free port; the URL template for `--autoscale-agent-url`."""
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/{{node}}/metrics"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
