"""NvmlInventory over a fake of the pynvml functions it calls (no driver on the test machine)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpupool.domain.errors import UnknownGpuModel
from gpupool.domain.units import MiB
from gpupool.node.nvml import NvmlInventory
from gpupool.ports import HealthEvent


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeCard:
    uuid: str
    name: str
    memory_mib: int
    bus_id: str
    sm_count: int | None = None  # None: nvmlDeviceGetAttributes not supported
    numa: int | None = None  # None: nvmlDeviceGetNumaNodeId not supported
    links: list[str] = field(default_factory=list)  # remote bus ids of enabled links


class FakeNvml:
    """The slice of pynvml's API that discovery uses, over a list of fake cards."""

    NVMLError = NVMLError
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1
    nvmlEventTypeXidCriticalError = 8
    nvmlEventTypeDoubleBitEccError = 2

    def __init__(self, cards: list[FakeCard]) -> None:
        self.cards = cards
        self.initialised = 0
        self.events: list[Any] = []
        self.registered: list[str] = []
        self.freed = False

    def _card(self, handle: Any) -> FakeCard:
        card: FakeCard = handle
        return card

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.82.07"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeCard:
        return self.cards[index]

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        return self._card(handle).uuid.encode()  # older pynvml returns bytes

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._card(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(total=self._card(handle).memory_mib * MiB)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=self._card(handle).bus_id)

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        card = self._card(handle)
        if card.sm_count is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(multiprocessorCount=card.sm_count)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        card = self._card(handle)
        if card.numa is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return card.numa

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        card = self._card(handle)
        if not card.links:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.NVML_FEATURE_ENABLED if link < len(card.links) else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        return SimpleNamespace(busId=self._card(handle).links[link])

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.freed = True

    def nvmlDeviceRegisterEvents(self, handle: Any, mask: int, event_set: str) -> None:
        self.registered.append(self._card(handle).uuid)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        if not self.events:
            raise NVMLError(self.NVML_ERROR_TIMEOUT)
        return self.events.pop(0)

    def xid(self, index: int, xid: int) -> None:
        self.events.append(
            SimpleNamespace(
                device=self.cards[index],
                eventType=self.nvmlEventTypeXidCriticalError,
                eventData=xid,
            )
        )

    def double_bit_ecc(self, index: int) -> None:
        self.events.append(
            SimpleNamespace(
                device=self.cards[index], eventType=self.nvmlEventTypeDoubleBitEccError, eventData=0
            )
        )


def dgx(n: int = 4) -> list[FakeCard]:
    """n A100s on one NVSwitch, split over two NUMA nodes."""
    return [
        FakeCard(
            uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000",
            name="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            bus_id=f"00000000:{0x10 + i:02X}:00.0",
            sm_count=108,
            numa=i * 2 // n,
            links=["00000000:C0:00.0"] * 12,
        )
        for i in range(n)
    ]


def test_discovers_cards() -> None:
    nvml = FakeNvml(dgx())
    inventory = NvmlInventory(nvml=nvml)
    gpus = inventory.devices()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert all(g.model == "A100-80GB" and g.memory_bytes == 81920 * MiB for g in gpus)
    assert [g.numa_node for g in gpus] == [0, 0, 1, 1]
    assert [g.nvlink_domain for g in gpus] == [0, 0, 0, 0]
    facts = inventory.facts()
    assert facts.driver_version == "580.82.07"
    assert facts.cuda_version == "13.0"
    assert [f.sm_count for f in facts.gpus] == [108] * 4
    assert facts.gpus[0].nvlink_peers == tuple(g.uuid for g in gpus[1:])
    inventory.close()
    assert nvml.initialised == 0


def test_direct_nvlink_pairs_and_fallbacks(tmp_path: Path) -> None:
    bus_b = "00000000:1B:00.0"
    cards = [
        FakeCard("GPU-a", "NVIDIA H100 80GB HBM3", 81559, "00000000:1A:00.0", links=[bus_b]),
        FakeCard("GPU-b", "NVIDIA H100 80GB HBM3", 81559, bus_b, links=["00000000:1A:00.0"]),
        FakeCard("GPU-c", "Tesla T4", 15360, "00000000:3B:00.0"),
    ]
    # no NUMA from NVML: read sysfs; no attributes: the catalogue's SM count
    for bus, node in (("0000:1a:00.0", "1"), ("0000:1b:00.0", "1"), ("0000:3b:00.0", "-1")):
        path = tmp_path / "bus" / "pci" / "devices" / bus
        path.mkdir(parents=True)
        (path / "numa_node").write_text(node + "\n")
    inventory = NvmlInventory(nvml=FakeNvml(cards), sysfs_root=tmp_path)
    gpus = inventory.devices()
    assert [g.model for g in gpus] == ["H100", "H100", "T4"]
    assert [g.numa_node for g in gpus] == [1, 1, 0]
    assert [g.nvlink_domain for g in gpus] == [0, 0, None]
    facts = inventory.facts().gpus
    assert [f.sm_count for f in facts] == [132, 132, 40]
    assert [f.nvlink_peers for f in facts] == [("GPU-b",), ("GPU-a",), ()]


def test_unknown_board_stops_discovery_with_its_index_and_uuid() -> None:
    cards = [*dgx(2), FakeCard("GPU-x", "NVIDIA B200", 183359, "00000000:50:00.0")]
    nvml = FakeNvml(cards)
    with pytest.raises(UnknownGpuModel) as err:
        NvmlInventory(nvml=nvml)
    assert "GPU 2 (GPU-x)" in str(err.value) and "NVIDIA B200" in str(err.value)
    assert nvml.initialised == 0  # NVML shut down again


def test_xid_events_flip_health() -> None:
    nvml = FakeNvml(dgx())
    inventory = NvmlInventory(nvml=nvml, ignored_xids=[94])
    nvml.xid(1, 13)  # application error: ignored
    nvml.xid(1, 94)  # ignored by configuration
    nvml.xid(2, 79)  # fell off the bus
    nvml.xid(2, 79)  # no second event for a card already unhealthy
    nvml.double_bit_ecc(3)

    async def first_two() -> list[HealthEvent]:
        seen: list[HealthEvent] = []
        stream = inventory.health_events()
        async for event in stream:
            seen.append(event)
            if len(seen) == 2:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        return seen

    events = asyncio.run(first_two())
    uuids = [g.uuid for g in inventory.devices()]
    assert events == [
        HealthEvent(uuids[2], False, "XID 79 critical error"),
        HealthEvent(uuids[3], False, "double-bit ECC error"),
    ]
    assert [g.healthy for g in inventory.devices()] == [True, True, False, False]
    assert nvml.registered == uuids
    assert nvml.freed
