"""The DRA driver on a node: the kubelet plugin's sockets served, the node's ResourceSlice kept
current. `gpupool agent --dra` runs it beside the device plugin (off by default; docs/dra.md).

The slice is republished every `interval_s` (the agent's heartbeat): the publisher writes only
when the cards changed (a card turned unhealthy leaves the slice), so a quiet node costs one
read per interval. The inventory's health events stay the device plugin's to consume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

from gpupool.domain.devices import Gpu
from gpupool.node.dra.plugin import DraPluginServer
from gpupool.ports import Inventory

log = logging.getLogger(__name__)


class SlicePublisher(Protocol):
    """Keeps the node's ResourceSlice equal to its cards (kube.ResourceSlicePublisher)."""

    async def publish(self, gpus: Sequence[Gpu]) -> int: ...


class DraNode:
    def __init__(
        self,
        server: DraPluginServer,
        publisher: SlicePublisher,
        inventory: Inventory,
        interval_s: float,
    ) -> None:
        self.server = server
        self.publisher = publisher
        self.inventory = inventory
        self.interval_s = interval_s
        self.published: int | None = None  # the pool generation last published

    async def publish_once(self) -> None:
        try:
            generation = await self.publisher.publish(self.inventory.devices())
        except Exception:
            log.exception("publishing the ResourceSlice failed; retrying in %gs", self.interval_s)
            return
        if generation != self.published:
            log.info("ResourceSlice published at pool generation %d", generation)
        self.published = generation

    async def run(self, stop: asyncio.Event) -> None:
        """Serve the plugin and keep the slice current until `stop` is set. The slice stays
        when the agent stops: a restart should not make the scheduler forget the node's cards."""
        await self.server.start()
        try:
            while not stop.is_set():
                await self.publish_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            await self.server.stop()
