"""The health of gpupool's devices, streamed to the kubelet (k8s.io/kubelet dra-health v1alpha1).

A kubelet with ResourceHealthStatus (on in 1.36) opens `NodeWatchResources` on the driver's
service socket once the driver registers, and shows what it hears in the status of each container
using a device (`allocatedResourcesStatus`); a driver that does not serve it gets the call
retried, with an error in the kubelet's log, every few seconds. It trusts a reading for the
timeout the reading carries, so the stream repeats the whole node every `interval_s` (the
agent's heartbeat), with a timeout of three intervals (at least the kubelet's default, 30 s):
a hung agent turns the cards Unknown rather than leaving them Healthy.

Every card of the inventory is reported, the unhealthy ones too (they leave the ResourceSlice,
but a pod may still hold a claim on one: the kubelet shows it that its card went bad).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.domain.devices import Gpu
from gpupool.node.dra.proto import dra_health_pb2, dra_health_pb2_grpc
from gpupool.node.dra.slices import device_name, pool_name
from gpupool.ports import Inventory

DEFAULT_TIMEOUT_S = 30  # the kubelet's own default (DefaultHealthTimeout)


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    device: str  # the ResourceSlice device name, gpu-<index>
    healthy: bool
    message: str


def device_health(gpus: Sequence[Gpu]) -> tuple[DeviceHealth, ...]:
    """Each card's health as the kubelet is told it, in index order."""
    return tuple(
        DeviceHealth(
            device_name(gpu),
            gpu.healthy,
            ""
            if gpu.healthy
            else f"card {gpu.uuid} (GPU {gpu.index}) is unhealthy (gpupool's agent saw an XID "
            f"error or lost the card); delete the pod so its claim is allocated on another card",
        )
        for gpu in sorted(gpus, key=lambda g: g.index)
    )


def timeout_for(interval_s: float) -> int:
    """How long the kubelet should trust a reading: three intervals, at least its default."""
    return max(DEFAULT_TIMEOUT_S, math.ceil(3 * interval_s))


def report(
    node: str, health: Sequence[DeviceHealth], now_s: int, timeout_s: int
) -> dra_health_pb2.NodeWatchResourcesResponse:
    answer = dra_health_pb2.NodeWatchResourcesResponse()
    for device in health:
        answer.devices.add(
            device=dra_health_pb2.DeviceIdentifier(
                pool_name=pool_name(node), device_name=device.device
            ),
            health=dra_health_pb2.HEALTHY if device.healthy else dra_health_pb2.UNHEALTHY,
            last_updated_time=now_s,
            health_check_timeout_seconds=timeout_s,
            message=device.message,
        )
    return answer


class HealthServicer(dra_health_pb2_grpc.DRAResourceHealthServicer):
    def __init__(
        self,
        node: str,
        inventory: Inventory,
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.inventory = inventory
        self.interval_s = interval_s
        self.clock = clock
        self._closing = asyncio.Event()

    def open(self) -> None:
        """Serve streams again (a server started after a stop)."""
        self._closing.clear()

    def close(self) -> None:
        """End every stream cleanly (the kubelet reads EOF, not an error), before a stop."""
        self._closing.set()

    def current(self) -> dra_health_pb2.NodeWatchResourcesResponse:
        health = device_health(self.inventory.devices())
        return report(self.node, health, int(self.clock()), timeout_for(self.interval_s))

    async def NodeWatchResources(
        self, request: dra_health_pb2.NodeWatchResourcesRequest, context: Any
    ) -> AsyncIterator[dra_health_pb2.NodeWatchResourcesResponse]:
        """Until `close`, the kubelet hanging up or the server stopping (which cancel it)."""
        while not self._closing.is_set():
            yield self.current()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.interval_s)
