"""The DRA driver on a node: the kubelet plugin's sockets served, the node's ResourceSlice kept
current. `gpupool agent --dra` runs it beside the device plugin (off by default; docs/dra.md).

It serves only on a container runtime that applies CDI devices (`runtime.cdi_refusal`): on any
other it withdraws the node's ResourceSlice, serves no plugin and says why in its log, so no
claim is placed where its container would run without the limiter.

The slice is republished every `interval_s` (the agent's heartbeat): the publisher writes only
when the cards changed (a card turned unhealthy leaves the slice), so a quiet node costs one
read per interval. The inventory's health events stay the device plugin's to consume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from gpupool.domain.devices import Gpu
from gpupool.node.dra.plugin import DraPluginServer
from gpupool.node.dra.runtime import cdi_refusal
from gpupool.ports import Inventory

log = logging.getLogger(__name__)


class SlicePublisher(Protocol):
    """Keeps the node's ResourceSlice equal to its cards (kube.ResourceSlicePublisher)."""

    async def publish(self, gpus: Sequence[Gpu]) -> int: ...

    async def withdraw(self) -> None: ...


class DraNode:
    def __init__(
        self,
        server: DraPluginServer,
        publisher: SlicePublisher,
        inventory: Inventory,
        interval_s: float,
        runtime: Callable[[], Awaitable[str]],
    ) -> None:
        """`runtime`: the node's container runtime as its kubelet reports it
        (`containerRuntimeVersion`, such as `containerd://2.0.5`)."""
        self.server = server
        self.runtime = runtime
        self.refused: str | None = None  # why the driver does not serve on this node
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

    async def runtime_refusal(self, stop: asyncio.Event) -> str | None:
        """Why the node's runtime cannot carry a claim's container (None: it can), read from the
        API server, tried again every interval until it answers or `stop` is set."""
        while not stop.is_set():
            try:
                return cdi_refusal(await self.runtime())
            except Exception as err:
                log.warning("cannot read the node's container runtime (%s); retrying", err)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        return None

    async def run(self, stop: asyncio.Event) -> None:
        """Serve the plugin and keep the slice current until `stop` is set. The slice stays
        when the agent stops: a restart should not make the scheduler forget the node's cards.
        On a runtime that does not apply CDI: withdraw the slice, serve nothing."""
        self.refused = await self.runtime_refusal(stop)
        if self.refused is not None:
            log.error("the DRA driver does not serve on this node: %s", self.refused)
            with contextlib.suppress(Exception):
                await self.publisher.withdraw()
            await stop.wait()
            return
        await self.server.start()
        try:
            while not stop.is_set():
                await self.publish_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            await self.server.stop()
