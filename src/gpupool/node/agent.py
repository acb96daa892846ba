"""The node agent's loops: the device plugin, health following, and the heartbeat (the node's
Lease renewed every period; the GpuNode written only when the report changes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gpupool.domain.devices import SHARES_PER_CARD, Gpu
from gpupool.domain.gpu_paths import PathFinding
from gpupool.domain.heartbeat import DEFAULT_HEARTBEAT_S
from gpupool.domain.reserve import allocatable_bytes
from gpupool.node.device_plugin.server import DevicePluginServer
from gpupool.ports import GpuNodeReporter, GpuPathChecker, InventoryFacts, NodeReport
from gpupool.rfc3339 import format_time

log = logging.getLogger(__name__)

# An unchanged report is published again this often (kubelet's nodeStatusReportFrequency): the
# reporter then reads the GpuNode and writes it only if someone edited or deleted it.
DEFAULT_RESYNC_S = 300.0


def node_report(
    node: str,
    gpus: tuple[Gpu, ...],
    facts: InventoryFacts,
    reserve_pct: float,
    shares_per_card: int = SHARES_PER_CARD,
) -> NodeReport:
    """The report for a node: its cards and what each can give to slices after the reserve."""
    return NodeReport(
        node=node,
        gpus=gpus,
        facts=facts,
        reserve_pct=reserve_pct,
        allocatable_bytes=tuple(
            (g.uuid, allocatable_bytes(g.total_memory, reserve_pct))
            for g in gpus
            if g.total_memory is not None
        ),
        shares_per_card=shares_per_card,
    )


class NodeAgent:
    """Runs the device plugin and, when a reporter is wired, heartbeats and publishes the node's
    GpuNode: every `heartbeat_s` it renews the node's Lease, and it publishes the report when it
    differs from the last one published (a card's health changed) or `resync_s` has passed.

    `reporter=None` is the seam for the GpuNode publisher that arrives with the CRDs: the agent
    then serves the device plugin only and says so once in its log.
    """

    def __init__(
        self,
        *,
        node: str,
        plugin: DevicePluginServer,
        reporter: GpuNodeReporter | None,
        reserve_pct: float,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        resync_s: float = DEFAULT_RESYNC_S,
        paths: GpuPathChecker | None = None,
    ) -> None:
        self.node = node
        self.plugin = plugin
        self.inventory = plugin.inventory
        self.reporter = reporter
        self.reserve_pct = reserve_pct
        self.heartbeat_s = heartbeat_s
        self.resync_s = resync_s
        self._changed = asyncio.Event()
        self.paths = paths
        self.paths_found: PathFinding | None = None  # the last look (the metric reads it)

    def report(self) -> NodeReport:
        return node_report(
            self.node,
            self.inventory.devices(),
            self.inventory.facts(),
            self.reserve_pct,
            self.plugin.config.per_card,  # the planner's share count: what the plugin offers
        )

    async def _follow_health(self) -> None:
        async for event in self.inventory.health_events():
            log.warning(
                "card %s is now %s: %s",
                event.uuid,
                "healthy" if event.healthy else "unhealthy",
                event.reason,
            )
            await self.plugin.refresh()
            self._changed.set()

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        if self.reporter is None:
            log.warning(
                "GpuNode publishing is not wired (it needs the GpuNode CRD and its client); "
                "serving the device plugin only"
            )
            return
        loop = asyncio.get_running_loop()
        published: NodeReport | None = None
        resync_at = 0.0
        while not stop.is_set():
            self._changed.clear()
            try:
                await self.reporter.renew(self.node)
            except Exception:
                log.exception(
                    "renewing the Lease of node %s failed; retrying next period", self.node
                )
            report = self.report()
            if report != published or loop.time() >= resync_at:
                try:
                    await self.reporter.publish(report)
                    published, resync_at = report, loop.time() + self.resync_s
                except Exception:
                    log.exception(
                        "publishing GpuNode %s failed; retrying at next heartbeat", self.node
                    )
            waits = [asyncio.create_task(e.wait()) for e in (stop, self._changed)]
            try:
                await asyncio.wait(
                    waits, timeout=self.heartbeat_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for task in waits:
                    task.cancel()

    async def _follow_paths(self, stop: asyncio.Event) -> None:
        """Look for other paths each time what the look reads changes (the checker watches the
        node's objects: no request while nothing changes), until `stop` is set."""
        if self.paths is None:
            return
        watching = asyncio.create_task(self.paths.run(stop))
        try:
            while not stop.is_set():
                due = asyncio.create_task(self.paths.changed())
                stopping = asyncio.create_task(stop.wait())
                try:
                    await asyncio.wait((due, stopping), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (due, stopping):
                        task.cancel()
                if due.done() and not due.cancelled():
                    await self._look_for_paths(self.report())
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    async def _look_for_paths(self, report: NodeReport) -> None:
        """Another device plugin or DRA driver handing out these cards: the checker says so on
        the GpuNode (placement then refuses the node) and the Node; logged loudly on a change."""
        assert self.paths is not None
        try:
            found = await self.paths.check([g.uuid for g in report.gpus], format_time(time.time()))
        except Exception:
            log.exception("looking for other GPU paths on node %s failed; retrying", self.node)
            return
        if found is not None:
            self.paths_found = found

    async def run(self, stop: asyncio.Event) -> None:
        health = asyncio.create_task(self._follow_health())
        heartbeat = asyncio.create_task(self._heartbeat(stop))
        paths = asyncio.create_task(self._follow_paths(stop))
        try:
            await self.plugin.run(stop)
        finally:
            for task in (health, heartbeat, paths):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.inventory.close()
