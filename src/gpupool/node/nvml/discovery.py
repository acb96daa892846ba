"""GPU discovery and XID health events with NVML (nvidia-ml-py, imported as `pynvml`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpupool.domain.devices import Gpu
from gpupool.domain.errors import UnknownGpuModel
from gpupool.domain.models import get_model
from gpupool.node.nvml.boards import model_for_board, nvlink_domains, nvlink_peers, xid_is_fatal
from gpupool.ports import CardTelemetry, GpuFacts, HealthEvent, InventoryFacts

log = logging.getLogger(__name__)

_WAIT_MS = 5000  # one blocking NVML wait; short enough that a cancelled agent stops promptly


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML writes `00000000:3B:00.0`; sysfs names the same function `0000:3b:00.0`."""
    domain, _, rest = nvml_bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest}".lower()


class NvmlInventory:
    """The node's cards as NVML reports them; health follows XID and double-bit ECC events.

    `nvml` is the `pynvml` module (injectable so tests can hand in a fake of its functions).
    A card whose board is not in the catalogue stops discovery with UnknownGpuModel.
    """

    def __init__(
        self,
        *,
        nvml: Any = None,
        ignored_xids: Iterable[int] = (),
        sysfs_root: Path = Path("/sys"),
    ) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml: Any = nvml
        self._ignored_xids = frozenset(ignored_xids)
        self._sysfs = sysfs_root
        self._lock = threading.Lock()
        self._handles: dict[str, Any] = {}
        self._xids: dict[str, int] = {}  # XID events seen per card since start (/metrics)
        nvml.nvmlInit()
        try:
            self._gpus, self._facts = self._discover()
        except BaseException:
            nvml.nvmlShutdown()
            raise

    # -- discovery -------------------------------------------------------------------------
    def _discover(self) -> tuple[dict[str, Gpu], InventoryFacts]:
        nvml = self._nvml
        found: list[tuple[int, str, str, int, int, int | None]] = []
        bus_to_uuid: dict[str, str] = {}
        remotes: dict[str, tuple[str, ...]] = {}
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            board = _text(nvml.nvmlDeviceGetName(handle))
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            try:
                model = model_for_board(board, memory)
            except UnknownGpuModel as err:
                raise UnknownGpuModel(f"GPU {index} ({uuid}): {err}") from None
            bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            bus_to_uuid[bus_id.upper()] = uuid
            self._handles[uuid] = handle
            sm_count = self._sm_count(handle) or get_model(model).sm_count
            found.append((index, uuid, model, memory, self._numa_node(handle, bus_id), sm_count))
            remotes[uuid] = self._nvlink_remotes(handle)
        links = {
            uuid: tuple(bus_to_uuid.get(r.upper(), f"switch:{r.upper()}") for r in rs)
            for uuid, rs in remotes.items()
        }
        domains = nvlink_domains(links)
        peers = nvlink_peers(domains)
        gpus = {
            uuid: Gpu(
                index=index,
                model=model,
                uuid=uuid,
                memory_bytes=memory,
                numa_node=numa,
                nvlink_domain=domains[uuid],
            )
            for index, uuid, model, memory, numa, _ in found
        }
        facts = InventoryFacts(
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_version=self._cuda_version(),
            gpus=tuple(GpuFacts(uuid, sm, peers[uuid]) for _, uuid, _, _, _, sm in found),
        )
        return gpus, facts

    def _cuda_version(self) -> str:
        try:
            version = int(self._nvml.nvmlSystemGetCudaDriverVersion_v2())
        except self._nvml.NVMLError:
            return ""
        return f"{version // 1000}.{version % 1000 // 10}"

    def _sm_count(self, handle: Any) -> int | None:
        try:
            count = int(self._nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
        except self._nvml.NVMLError:
            return None
        return count if count > 0 else None

    def _numa_node(self, handle: Any, bus_id: str) -> int:
        try:
            node = int(self._nvml.nvmlDeviceGetNumaNodeId(handle))
        except (self._nvml.NVMLError, AttributeError):
            path = self._sysfs / "bus" / "pci" / "devices" / _sysfs_bus_id(bus_id) / "numa_node"
            try:
                node = int(path.read_text().strip())
            except (OSError, ValueError):
                node = 0
        return max(node, 0)  # -1: the platform has no NUMA information

    def _nvlink_remotes(self, handle: Any) -> tuple[str, ...]:
        nvml = self._nvml
        reached: list[str] = []
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except nvml.NVMLError:
                continue
            if remote not in reached:
                reached.append(remote)
        return tuple(reached)

    # -- Inventory ---------------------------------------------------------------------------
    def devices(self) -> tuple[Gpu, ...]:
        with self._lock:
            return tuple(sorted(self._gpus.values(), key=lambda g: g.index))

    def facts(self) -> InventoryFacts:
        return self._facts

    def telemetry(self) -> tuple[CardTelemetry, ...]:
        """Each card's readings now; a reading the board does not support is None."""
        return tuple(self._reading(g.uuid) for g in self.devices())

    def _reading(self, uuid: str) -> CardTelemetry:
        nvml, handle = self._nvml, self._handles[uuid]

        def ask(read: Callable[[], Any]) -> Any:
            try:
                return read()
            except nvml.NVMLError:  # NOT_SUPPORTED on this board, or the card fell off the bus
                return None

        util = ask(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = ask(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        temperature = ask(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        power_mw = ask(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        ecc = ask(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        )
        with self._lock:
            xids = self._xids.get(uuid, 0)
        return CardTelemetry(
            uuid,
            utilization_pct=None if util is None else float(util.gpu),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else float(power_mw) / 1000.0,
            ecc_uncorrected=None if ecc is None else int(ecc),
            xid_events=xids,
        )

    def _apply(self, event: HealthEvent) -> bool:
        with self._lock:
            gpu = self._gpus.get(event.uuid)
            if gpu is None or gpu.healthy == event.healthy:
                return False
            self._gpus[event.uuid] = replace(gpu, healthy=event.healthy)
            return True

    def interpret(self, event: Any) -> HealthEvent | None:
        """Turn one NVML event into a health change, or None when it does not hurt the card."""
        nvml = self._nvml
        uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
        if event.eventType == nvml.nvmlEventTypeXidCriticalError:
            xid = int(event.eventData)
            with self._lock:
                self._xids[uuid] = self._xids.get(uuid, 0) + 1
            if not xid_is_fatal(xid, self._ignored_xids):
                log.info("GPU %s: XID %d is an application error; card stays healthy", uuid, xid)
                return None
            return HealthEvent(uuid, False, f"XID {xid} critical error")
        if event.eventType == nvml.nvmlEventTypeDoubleBitEccError:
            return HealthEvent(uuid, False, "double-bit ECC error")
        return None

    def _wait(self, event_set: Any) -> Any:
        try:
            return self._nvml.nvmlEventSetWait_v2(event_set, _WAIT_MS)
        except self._nvml.NVMLError as err:
            if getattr(err, "value", None) == self._nvml.NVML_ERROR_TIMEOUT:
                return None
            raise

    async def health_events(self) -> AsyncIterator[HealthEvent]:
        nvml = self._nvml
        event_set = nvml.nvmlEventSetCreate()
        mask = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        try:
            for uuid, handle in self._handles.items():
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                except nvml.NVMLError as err:
                    log.warning("GPU %s: cannot watch XID events (%s)", uuid, err)
            while True:
                raw = await asyncio.to_thread(self._wait, event_set)
                if raw is None:
                    continue
                event = self.interpret(raw)
                if event is not None and self._apply(event):
                    yield event
        finally:
            nvml.nvmlEventSetFree(event_set)

    def close(self) -> None:
        self._nvml.nvmlShutdown()
