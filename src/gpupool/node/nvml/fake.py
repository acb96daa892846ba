"""A fake inventory from a spec such as `8xA100-80GB` or `2xH800,1xT4`, for kwok nodes and tests."""

from __future__ import annotations

import asyncio
import uuid as uuidlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from gpupool.domain.devices import Gpu
from gpupool.domain.errors import InvalidNode
from gpupool.domain.models import parse_gpu_list
from gpupool.ports import CardTelemetry, GpuFacts, HealthEvent, InventoryFacts

_NVLINK_FAMILIES = ("A100", "H100", "H800", "H200", "V100")  # SXM boards ship in NVLink systems
_NAMESPACE = uuidlib.UUID("4f1c7e52-3f0a-4d55-9a39-6b8f0c7d2a11")


def parse_fake_spec(spec: str) -> tuple[tuple[int, str], ...]:
    """Parse `8xA100-80GB` / `2xH800,1xT4` / `T4` into (count, canonical model) pairs."""
    if not spec.strip():
        raise InvalidNode("fake GPU spec is empty; write it like 8xA100-80GB or 2xH800,1xT4")
    result: list[tuple[int, str]] = []
    for count, model in parse_gpu_list(spec):
        if count <= 0:
            raise InvalidNode(f"fake GPU spec {spec!r}: count must be 1 or more")
        if not model.known:
            raise InvalidNode(
                f"fake GPU spec {spec!r}: {model.name} has no published memory size, "
                f"so it cannot be faked; pick a model such as A100-80GB"
            )
        result.append((count, model.name))
    return tuple(result)


def fake_uuid(node: str, index: int) -> str:
    """A stable, real-looking card uuid for card `index` of fake node `node`."""
    return f"GPU-{uuidlib.uuid5(_NAMESPACE, f'{node}/{index}')}"


class FakeInventory:
    """Cards described, not discovered. `set_health` plays the part of an XID event;
    `set_telemetry` and `record_xid` set what the card reports (idle and cool until told)."""

    def __init__(self, gpus: Sequence[Gpu], facts: InventoryFacts | None = None) -> None:
        self._gpus = {g.uuid: g for g in gpus}
        if len(self._gpus) != len(gpus):
            raise InvalidNode("fake inventory: card uuids repeat")
        self._facts = facts or InventoryFacts(
            driver_version="fake",
            cuda_version="fake",
            gpus=tuple(GpuFacts(g.uuid, g.spec.sm_count) for g in gpus),
        )
        self._events: asyncio.Queue[HealthEvent] = asyncio.Queue()
        self._telemetry = {
            g.uuid: CardTelemetry(
                g.uuid,
                utilization_pct=0.0,
                memory_used_bytes=0,
                memory_total_bytes=g.total_memory,
                temperature_c=30.0,
                power_w=50.0,
                ecc_uncorrected=0,
            )
            for g in gpus
        }

    @classmethod
    def from_spec(cls, spec: str, *, node: str) -> FakeInventory:
        """Cards in spec order; a model group splits over two NUMA nodes; SXM families NVLink."""
        gpus: list[Gpu] = []
        domain = 0
        for count, model in parse_fake_spec(spec):
            nvlinked = count > 1 and model.split("-")[0] in _NVLINK_FAMILIES
            half = max(1, -(-count // 2))
            for i in range(count):
                index = len(gpus)
                gpus.append(
                    Gpu(
                        index=index,
                        model=model,
                        uuid=fake_uuid(node, index),
                        numa_node=(i // half) if count > 1 else 0,
                        nvlink_domain=domain if nvlinked else None,
                    )
                )
            domain += 1 if nvlinked else 0
        facts = InventoryFacts(
            driver_version="fake",
            cuda_version="fake",
            gpus=tuple(
                GpuFacts(
                    g.uuid,
                    g.spec.sm_count,
                    tuple(
                        o.uuid
                        for o in gpus
                        if o is not g
                        and g.nvlink_domain is not None
                        and o.nvlink_domain == g.nvlink_domain
                    ),
                )
                for g in gpus
            ),
        )
        return cls(gpus, facts)

    def devices(self) -> tuple[Gpu, ...]:
        return tuple(sorted(self._gpus.values(), key=lambda g: g.index))

    def facts(self) -> InventoryFacts:
        return self._facts

    def telemetry(self) -> tuple[CardTelemetry, ...]:
        return tuple(self._telemetry[g.uuid] for g in self.devices())

    def set_telemetry(
        self,
        uuid: str,
        *,
        utilization_pct: float | None = None,
        memory_used_bytes: int | None = None,
        temperature_c: float | None = None,
        power_w: float | None = None,
        ecc_uncorrected: int | None = None,
    ) -> None:
        """Set the readings given (the others stay as they were)."""
        now = self._reading(uuid)
        self._telemetry[uuid] = replace(
            now,
            utilization_pct=now.utilization_pct if utilization_pct is None else utilization_pct,
            memory_used_bytes=now.memory_used_bytes
            if memory_used_bytes is None
            else memory_used_bytes,
            temperature_c=now.temperature_c if temperature_c is None else temperature_c,
            power_w=now.power_w if power_w is None else power_w,
            ecc_uncorrected=now.ecc_uncorrected if ecc_uncorrected is None else ecc_uncorrected,
        )

    def record_xid(self, uuid: str, xid: int, *, fatal: bool) -> None:
        """An XID event on the card: counted; a fatal one also makes the card unhealthy."""
        now = self._reading(uuid)
        self._telemetry[uuid] = replace(now, xid_events=now.xid_events + 1)
        if fatal:
            self.set_health(uuid, False, f"XID {xid} critical error")

    def _reading(self, uuid: str) -> CardTelemetry:
        reading = self._telemetry.get(uuid)
        if reading is None:
            raise InvalidNode(f"fake inventory has no card {uuid}")
        return reading

    def set_health(self, uuid: str, healthy: bool, reason: str = "fake") -> None:
        gpu = self._gpus.get(uuid)
        if gpu is None:
            raise InvalidNode(f"fake inventory has no card {uuid}")
        if gpu.healthy == healthy:
            return
        self._gpus[uuid] = replace(gpu, healthy=healthy)
        self._events.put_nowait(HealthEvent(uuid, healthy, reason))

    async def health_events(self) -> AsyncIterator[HealthEvent]:
        while True:
            yield await self._events.get()

    def close(self) -> None:
        return None
