"""The agent's series: the physical layer (per card, from the inventory: NVML or the fake) and
the logical layer (per lease on this node: what each slice was given).

Card labels join with DCGM exporter's: `gpu` (index), `UUID`, `modelName`, `Hostname`
(`modelName` is gpupool's catalogue name such as A100-80GB, not NVML's board string, so join on
`UUID` or `Hostname`+`gpu`). Memory really used per lease is what the container's limiter
counts (its accounting file in a host folder per container, node.limiter_usage): the bytes its
processes hold on each slice, beside the slice's size, and when it last allocated or freed.

`AgentCollector.update` takes one reading (the HTTP handler calls it before each scrape); the
collector then yields fresh metric families from it, so no series of a card or lease that is
gone lingers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.domain.devices import Gpu
from gpupool.domain.gpu_paths import PathFinding
from gpupool.ports import CardTelemetry, ContainerUsage, PodLease

CARD_LABELS = ("Hostname", "gpu", "UUID", "modelName")
LEASE_LABELS = ("Hostname", "gpu", "UUID", "namespace", "pod", "lease")
ACTIVITY_LABELS = ("Hostname", "namespace", "pod", "lease")


@dataclass(frozen=True, slots=True)
class AgentReading:
    """One scrape's worth of the node: its cards, their readings, the leases placed on it
    (None: the lease source could not answer, so the lease series are left out), and what the
    limiter of each lease's container reports, by lease name (absent: no CUDA call yet)."""

    node: str
    gpus: tuple[Gpu, ...]
    telemetry: tuple[CardTelemetry, ...]
    leases: tuple[PodLease, ...] | None
    usage: Mapping[str, ContainerUsage] = field(default_factory=dict)
    paths: PathFinding | None = None  # the last look for other GPU paths (None: not looked yet)


class AgentCollector(Collector):
    def __init__(self, node: str) -> None:
        self._reading = AgentReading(node, (), (), None)

    def update(self, reading: AgentReading) -> None:
        self._reading = reading

    def collect(self) -> Iterator[Metric]:
        return iter(agent_metrics(self._reading))


def _gauge(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def agent_metrics(reading: AgentReading) -> list[Metric]:
    """Every agent series for one reading."""
    host = reading.node
    by_uuid = {t.uuid: t for t in reading.telemetry}
    util = _gauge(
        "gpupool_agent_card_utilization_ratio",
        "Share of time the card's SMs were busy over the driver's sample period (0-1); "
        "DCGM_FI_DEV_GPU_UTIL / 100",
        CARD_LABELS,
    )
    used = _gauge(
        "gpupool_agent_card_memory_used_bytes",
        "Device memory in use on the card, as the driver counts it (DCGM_FI_DEV_FB_USED, bytes)",
        CARD_LABELS,
    )
    total = _gauge(
        "gpupool_agent_card_memory_total_bytes", "Device memory of the card, bytes", CARD_LABELS
    )
    temp = _gauge(
        "gpupool_agent_card_temperature_celsius",
        "GPU core temperature (DCGM_FI_DEV_GPU_TEMP)",
        CARD_LABELS,
    )
    power = _gauge(
        "gpupool_agent_card_power_watts", "Power draw (DCGM_FI_DEV_POWER_USAGE)", CARD_LABELS
    )
    ecc = CounterMetricFamily(
        "gpupool_agent_card_ecc_uncorrected_errors",
        "Uncorrected (double-bit) ECC errors since the driver loaded "
        "(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)",
        labels=list(CARD_LABELS),
    )
    xid = CounterMetricFamily(
        "gpupool_agent_card_xid_events",
        "XID events seen on the card since the agent started, fatal or not",
        labels=list(CARD_LABELS),
    )
    healthy = _gauge(
        "gpupool_agent_card_healthy",
        "1 while the card is healthy (no fatal XID or double-bit ECC event), else 0",
        CARD_LABELS,
    )
    allocated = _gauge(
        "gpupool_agent_card_allocated_bytes",
        "Device memory given to slices on the card: the sum of the leases placed on it",
        CARD_LABELS,
    )
    lease_alloc = _gauge(
        "gpupool_agent_lease_memory_allocated_bytes",
        "Device memory of one lease's slice on one card (the limiter's cap for the container)",
        LEASE_LABELS,
    )
    lease_compute = _gauge(
        "gpupool_agent_lease_compute_ratio",
        "Share of the card's SMs reserved for the lease's slice (0: no hard cap)",
        LEASE_LABELS,
    )
    lease_used = _gauge(
        "gpupool_agent_lease_memory_used_bytes",
        "Device memory the lease's container really holds on the slice, as its limiter counts "
        "it (hami: vGPU_device_memory_usage_in_bytes)",
        LEASE_LABELS,
    )
    last_active = _gauge(
        "gpupool_agent_lease_last_activity_timestamp_seconds",
        "When the lease's container last allocated or freed device memory (unix time)",
        ACTIVITY_LABELS,
    )
    source_up = _gauge(
        "gpupool_agent_lease_source_up",
        "1 when the agent could list this node's GpuLeases for this scrape, else 0",
        ("Hostname",),
    )
    per_card: dict[str, int] = {}
    for lease in reading.leases or ():
        namespace, _, pod = lease.pod.partition("/")
        usage = reading.usage.get(lease.lease)
        for row, piece in enumerate(lease.slices):  # row i of the limits file is slice i
            per_card[piece.uuid] = per_card.get(piece.uuid, 0) + piece.size_bytes
            labels = [host, str(piece.gpu_index), piece.uuid, namespace, pod, lease.lease]
            lease_alloc.add_metric(labels, piece.size_bytes)
            lease_compute.add_metric(labels, piece.compute_milli / 1000.0)
            if usage is not None and row < len(usage.used_bytes):
                lease_used.add_metric(labels, usage.used_bytes[row])
        if usage is not None and usage.last_active_s is not None:
            last_active.add_metric([host, namespace, pod, lease.lease], usage.last_active_s)
    for gpu in reading.gpus:
        labels = [host, str(gpu.index), gpu.uuid, gpu.model]
        t = by_uuid.get(gpu.uuid, CardTelemetry(gpu.uuid))
        _add(util, labels, None if t.utilization_pct is None else t.utilization_pct / 100.0)
        _add(used, labels, t.memory_used_bytes)
        _add(total, labels, t.memory_total_bytes or gpu.total_memory)
        _add(temp, labels, t.temperature_c)
        _add(power, labels, t.power_w)
        if t.ecc_uncorrected is not None:
            ecc.add_metric(labels, t.ecc_uncorrected)
        xid.add_metric(labels, t.xid_events)
        healthy.add_metric(labels, 1.0 if gpu.healthy else 0.0)
        if reading.leases is not None:
            allocated.add_metric(labels, per_card.get(gpu.uuid, 0))
    source_up.add_metric([host], 0.0 if reading.leases is None else 1.0)
    families: Iterable[Metric] = (
        util, used, total, temp, power, ecc, xid, healthy, allocated, lease_alloc,
        lease_compute, lease_used, last_active, source_up,
    )  # fmt: skip
    return [*families, *path_metrics(host, reading.paths)]


def path_metrics(host: str, finding: PathFinding | None) -> list[Metric]:
    """Whether another path hands out this node's cards (1: gpupool refuses the node), and each
    such path's devices; nothing before the agent first looked."""
    refused = _gauge(
        "gpupool_agent_other_gpu_path",
        "1 when another device plugin or DRA driver hands out this node's GPUs (gpupool then "
        "places nothing new here; the GpuNode's OtherGpuPath condition says what to do), else 0",
        ("Hostname",),
    )
    devices = _gauge(
        "gpupool_agent_other_gpu_path_devices",
        "Devices another path offers on this node: a device plugin's resource on the Node "
        "(kind device-plugin) or a DRA driver's devices in its ResourceSlices (kind dra-driver)",
        ("Hostname", "kind", "path"),
    )
    if finding is None:
        return []
    refused.add_metric([host], 1.0 if finding.refused else 0.0)
    for other in finding.others:
        kind = other.kind.name.lower().replace("_", "-")
        devices.add_metric([host, kind, other.name], float(other.amount))
    return [refused, devices]


def _add(family: GaugeMetricFamily, labels: list[str], value: float | int | None) -> None:
    if value is not None:  # a reading the board cannot give is left out, not reported as 0
        family.add_metric(labels, float(value))
