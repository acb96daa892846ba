"""NvmlInventory's per-card readings over the fake of pynvml (test_agent_nvml.FakeNvml) with the
readings /metrics asks for: each one as NVML gives it, a reading the board does not support left
as None, and XID events counted whether or not they are fatal."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from test_agent_nvml import FakeNvml, NVMLError, dgx

from gpupool.domain.units import MiB
from gpupool.node.nvml import NvmlInventory


class ReadingNvml(FakeNvml):
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self) -> None:
        super().__init__(dgx(2))
        self.no_power: set[str] = set()

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        card = self._card(handle)
        return SimpleNamespace(total=card.memory_mib * MiB, used=1000 * MiB)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return SimpleNamespace(gpu=42, memory=10)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        if self._card(handle).uuid in self.no_power:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return 250_500  # milliwatts

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)
        return 3


def test_each_reading_is_what_nvml_gives_and_an_unsupported_one_is_none() -> None:
    nvml = ReadingNvml()
    inventory = NvmlInventory(nvml=nvml)
    a, b = (g.uuid for g in inventory.devices())
    nvml.no_power.add(b)
    ta, tb = inventory.telemetry()
    assert (ta.uuid, ta.utilization_pct, ta.temperature_c, ta.power_w) == (a, 42.0, 61.0, 250.5)
    assert (ta.memory_used_bytes, ta.memory_total_bytes) == (1000 * MiB, 81920 * MiB)
    assert ta.ecc_uncorrected == 3 and ta.xid_events == 0
    assert tb.power_w is None and tb.temperature_c == 61.0
    inventory.close()


def test_xid_events_are_counted_fatal_or_not() -> None:
    nvml = ReadingNvml()
    inventory = NvmlInventory(nvml=nvml)
    nvml.xid(0, 13)  # an application error: the card stays healthy
    nvml.xid(0, 79)  # fallen off the bus: unhealthy

    async def first_event() -> None:
        async for _ in inventory.health_events():
            return

    asyncio.run(asyncio.wait_for(first_event(), timeout=10))
    assert [t.xid_events for t in inventory.telemetry()] == [2, 0]
    assert [g.healthy for g in inventory.devices()] == [False, True]
    inventory.close()
