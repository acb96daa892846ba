"""Protocols the controllers and the agent need from the outside world, and the small values they
carry.

Implementations live in `gpupool.adapters` (real I/O) and in the tests (in-memory fakes of our own
interfaces). Keep this module small: a Protocol, the values it returns, nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import SHARES_PER_CARD, Gpu
from gpupool.domain.gpu_paths import PathFinding
from gpupool.state.claim_ask import ClaimObject
from gpupool.state.claim_writes import ClaimAllocationWrite
from gpupool.state.defrag import DisruptionBudget
from gpupool.state.lease import LeaseRecord
from gpupool.state.lease_writes import EvictionMark, LeaseStatusWrite
from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.pods import PodView
from gpupool.state.pool import PoolObject
from gpupool.state.quota_object import QuotaObject
from gpupool.state.status_writes import GpuNodeHealthWrite, PoolStatusWrite, QuotaStatusWrite
from gpupool.state.workload import ScalableWorkload


class Clock(Protocol):
    """Wall-clock seconds since the epoch (`time.time` in the daemons, a number in tests): the one
    way decision code learns the time; the plans themselves take `now` as an argument."""

    def __call__(self) -> float: ...


Json = dict[str, Any]  # an object or patch as the API server holds or takes it (adapters)


class Outcomes(Protocol):
    """What the controller's writers report having done, for /metrics (adapters.metrics'
    ControllerMetrics): a pod given a notice, a pod evicted (or deleted on a lost node), by the
    reason the pod's Event names (QuotaReclaim, RoomReclaim, LeaseExpired, NodeLost)."""

    def noticed(self, reason: str) -> None: ...

    def evicted(self, reason: str) -> None: ...


class EventWriter(Protocol):
    """Records a Kubernetes Event on an object (a pod, a GpuLease, a GpuQuota...)."""

    async def event(
        self,
        about: ObjectReference,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None: ...


class ClusterApi(EventWriter, Protocol):
    """What the controllers' reconcilers read from and write to the API server
    (`adapters.cluster.KubeClusterApi`; an in-memory fake in the unit tests).

    Reads hand decoded values (`state.listed.Listed`: each with its `ObjectReference`, and the
    objects that did not decode, which a loop's containment sets aside): the adapter decodes each
    object once, with the memoised readers of `adapters.kubernetes.decoded`. Writes take
    references and values the adapter encodes (a status: `state.status_writes`, compared
    beforehand with the decoded `Listed.stored`): a pod's writes are intents (`admit_pod`,
    `annotate_pod`) whose patches, and the `test` ops that are their optimistic concurrency,
    the adapter builds (`adapters.kubernetes.pod_patches`). A write answers False when its
    object is gone or changed under it (404, 409, a failed JSON-patch test) and raises on any
    other refusal: the round stops and the next one tries again from what the API server then
    holds."""

    async def tenant_pods(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[PodView]:
        """Every pod with a tenant label; `fresh`: from the API server itself, not a cache;
        `keys`: only these (namespace/name; those that exist)."""
        ...

    async def quotas(self) -> Listed[QuotaObject]: ...

    async def leases(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[LeaseRecord]:
        """Every GpuLease; `fresh`: from the API server itself, not a cache; `keys`: only these
        (namespace/name; a loop's round over what changed costs what changed)."""
        ...

    async def nodes(self) -> Listed[NodeObject]: ...

    async def gpu_nodes(self, names: Collection[str] | None = None) -> Listed[GpuNodeObject]:
        """Every GpuNode; `names`: only these (those that exist)."""
        ...

    async def node_renewals(self, names: Collection[str] | None = None) -> Mapping[str, float]:
        """The GPU nodes' heartbeats, decoded: when each node's coordination.k8s.io Lease (named
        after the node) was last renewed, epoch seconds by node name (a Lease without a readable
        renewTime is left out, as if missing); `names`: only these nodes'."""
        ...

    async def pod(self, namespace: str, name: str) -> PodView | Unreadable | None:
        """The pod as the API server holds it now; None when there is none."""
        ...

    async def admit_pod(self, pod: PodView, admitted: str) -> bool:
        """Lift the pod's quota gate and write its `gpupool.io/admitted` record (`admitted`, as
        `adapters.wire.admitted` writes it; its queue note goes), in one write that holds only
        if it is still the same pod, gated where `pod` saw the gate; False when it is gone or
        changed."""
        ...

    async def annotate_pod(
        self, pod: PodView, annotations: Mapping[str, str | None], *, same_uid: bool
    ) -> bool:
        """Set (None: remove) the pod's annotations; `same_uid`: only if it is still this pod
        (not one made again under its name: False then, as when it is gone)."""
        ...

    async def delete_pod(
        self, namespace: str, name: str, *, grace_s: int | None = None
    ) -> bool: ...

    async def evict_pod(self, namespace: str, name: str) -> str | None:
        """None when evicted (or gone); else why the Eviction API refused (429)."""
        ...

    async def patch_quota_status(self, name: str, status: QuotaStatusWrite) -> bool:
        """Merge `status` into the GpuQuota's status; False when it is gone."""
        ...

    async def move_lease(self, namespace: str, name: str, move: LeaseStatusWrite) -> bool:
        """Write the GpuLease's phase (with its condition, times and metering); False when it
        is gone."""
        ...

    async def mark_lease_evicted(self, namespace: str, name: str, mark: EvictionMark) -> bool:
        """Record on the GpuLease why its pod was evicted (`status.reclaim`, with the room hold
        for room); False when it is gone."""
        ...

    async def end_room_hold(self, namespace: str, name: str) -> bool:
        """End the room hold the GpuLease carries (its eviction record stays); False when it is
        gone."""
        ...

    async def set_lease_expiry(
        self, namespace: str, name: str, ttl_s: float, expiry: float, renewal: str | None
    ) -> bool:
        """Give the GpuLease its expiry terms (`spec`: TTL, when it expires, the renewal it
        answers); False when it is gone."""
        ...

    async def delete_lease(self, namespace: str, name: str) -> bool: ...

    async def create_lease(self, lease: LeaseRecord) -> bool:
        """Create the GpuLease `lease` describes; False when one of that name exists already
        (409)."""
        ...

    async def patch_gpu_node_status(self, name: str, status: GpuNodeHealthWrite) -> bool:
        """Set the GpuNode's health and conditions (the list whole); False when it is gone."""
        ...


class DefragApi(ClusterApi, Protocol):
    """What the defragmentation loop needs besides the other reconcilers' reads and writes."""

    async def gpu_pools(self) -> Listed[PoolObject]: ...

    async def disruption_budgets(self) -> Listed[DisruptionBudget]:
        """Every PodDisruptionBudget (policy/v1), in all namespaces."""
        ...

    async def annotate_gpu_node(self, name: str, key: str, value: str | None) -> bool:
        """Set (None: remove) one annotation of a GpuNode; False when it is gone."""
        ...

    async def patch_gpu_pool_status(self, name: str, status: PoolStatusWrite) -> bool: ...


class PoolStatusApi(ClusterApi, Protocol):
    """What the GpuPool status writer needs besides the other reconcilers' reads and writes."""

    async def gpu_pools(self) -> Listed[PoolObject]: ...

    async def patch_gpu_pool_status(self, name: str, status: PoolStatusWrite) -> bool:
        """Merge `status` into the GpuPool's status; False when it is gone."""
        ...


class ClaimApi(ClusterApi, Protocol):
    """What the claim allocator (claims on gpu.gpupool.io) needs besides the other reconcilers'
    reads and writes: resource.k8s.io/v1 ResourceClaims and ResourceSlices."""

    async def resource_claim(self, namespace: str, name: str) -> ClaimObject | None:
        """The ResourceClaim, decoded (what it asks of gpupool's class, whether it is allocated,
        its configs for gpupool's driver), or None when it does not exist (yet)."""
        ...

    async def patch_claim_status(self, allocation: ClaimAllocationWrite) -> bool:
        """Write the allocation into its claim's status subresource, only if the claim is still
        the one of `allocation.target.uid`; False when it is gone or was made again."""
        ...

    async def leases_on_node(self, node: str) -> Listed[LeaseRecord]:
        """The GpuLeases on `node` as the API server holds them now (a consistent read, not the
        watch cache): what another writer made a moment ago is in it."""
        ...

    async def publishing_nodes(self) -> frozenset[str]:
        """The nodes whose ResourceSlice of gpupool's driver lists devices (decoded from every
        ResourceSlice: its pool is the node)."""
        ...


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What discovery learns about one card beyond the domain `Gpu` (for the GpuNode report)."""

    uuid: str
    sm_count: int | None
    nvlink_peers: tuple[str, ...] = ()  # uuids of the cards this one reaches over NVLink


@dataclass(frozen=True, slots=True)
class InventoryFacts:
    driver_version: str
    cuda_version: str
    gpus: tuple[GpuFacts, ...]


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """A card changed health: from an XID event (NVML) or a test/kwok fake."""

    uuid: str
    healthy: bool
    reason: str


@dataclass(frozen=True, slots=True)
class CardTelemetry:
    """One card's readings now (NVML on a real node, what a test set on the fake).

    None: the card or driver cannot tell (NVML answers NOT_SUPPORTED on some boards)."""

    uuid: str
    utilization_pct: float | None = None  # SM busy over the driver's last sample period
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_uncorrected: int | None = None  # volatile double-bit ECC errors since the driver loaded
    xid_events: int = 0  # XID events seen by this agent since it started (fatal or not)


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """What a GPU container's limiter reports (its accounting file, node.limiter_usage): bytes
    in use per limits line, i.e. per slice of its lease in order, summed over the container's
    processes; and when it last charged or credited device memory (unix s; None: not yet)."""

    used_bytes: tuple[int, ...]
    last_active_s: float | None


class Inventory(Protocol):
    """The GPUs of this node: NVML on a real node, a spec such as `8xA100-80GB` on kwok nodes."""

    def devices(self) -> tuple[Gpu, ...]:
        """The cards now, health included, ordered by index."""
        ...

    def facts(self) -> InventoryFacts: ...

    def telemetry(self) -> tuple[CardTelemetry, ...]:
        """Each card's readings now, in index order (the agent's /metrics reads it per scrape)."""
        ...

    def health_events(self) -> AsyncIterator[HealthEvent]:
        """Health changes as they happen; `devices()` already reflects an event when it arrives."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PodLease:
    """One pod's GPU lease as the node agent sees it (a GpuLease placed on this node)."""

    lease: str  # namespace/name of the GpuLease
    pod: str  # namespace/name of the pod
    pod_uid: str
    node: str
    slices: tuple[Slice, ...]  # one per GPU, in the pod's GPU order
    compute_mode: str | None = None  # "mps" | "none" | None: the lease's spec.computeMode
    mps_percentage: int | None = None  # spec.mpsActiveThreadPercentage (with "mps")
    device_ids: tuple[str, ...] = ()  # virtual devices the kubelet allocated; () while pending

    @property
    def card_uuids(self) -> tuple[str, ...]:
        return tuple(s.uuid for s in self.slices)


class LeaseSourceUnavailable(Exception):
    """An AllocationSource cannot answer now (API server unreachable, not wired); retryable."""


class AllocationSource(Protocol):
    """Where the device plugin learns which lease a kubelet Allocate serves.

    The plugin lists the leases placed on its node and matches the device IDs the kubelet chose
    (each names its card) against them with a pure function; once it has answered, it records the
    device IDs on the lease so that a repeated Allocate gets the same answer and a restarted agent
    knows what is already granted on each card.
    """

    async def leases_on(self, node: str) -> tuple[PodLease, ...]: ...

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None: ...


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What the agent publishes about its node (the GpuNode object's status)."""

    node: str
    gpus: tuple[Gpu, ...]
    facts: InventoryFacts
    reserve_pct: float
    allocatable_bytes: tuple[tuple[str, int], ...]  # (card uuid, bytes slices may take)
    shares_per_card: int = SHARES_PER_CARD  # the vgpu devices offered per card


class GpuNodeReporter(Protocol):
    """Publishes a NodeReport (the GpuNode, written only when it changes) and renews the node's
    heartbeat (its Lease, every period). Implemented with the CRDs and coordination.k8s.io."""

    async def publish(self, report: NodeReport) -> None: ...

    async def renew(self, node: str) -> None:
        """The node's heartbeat: its agent is alive now."""
        ...


class GpuPathChecker(Protocol):
    """Looks for other paths handing out the node's cards (`domain.gpu_paths`) and says what
    it found on the GpuNode and the Node; None when it could not look. It keeps what it reads
    up to date while `run` runs, and `changed` returns when a look is due."""

    async def run(self, stop: asyncio.Event) -> None: ...

    async def changed(self) -> None: ...

    async def check(self, card_uuids: Collection[str], stamp: str) -> PathFinding | None: ...


@dataclass(frozen=True, slots=True)
class PodPlace:
    """A running GPU pod and the node it runs on (`address`: the node's InternalIP, if known)."""

    namespace: str
    name: str
    node: str
    address: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class UtilisationSource(Protocol):
    """Where the autoscaler reads its pods' GPU utilisation: the node agents' per-lease series
    (`adapters.metrics.utilisation.AgentScrapeSource`) or a Prometheus query
    (`PrometheusSource`)."""

    async def pod_utilisation(self, pods: Sequence[PodPlace]) -> Mapping[str, float]:
        """Percent (0-100) per pod key (`namespace/name`); a pod without a figure (its node
        did not answer, no lease series yet) is left out, never reported as 0."""
        ...


class WorkloadApi(Protocol):
    """What the autoscaler reads and writes beside `ClusterApi`: Deployments and StatefulSets
    and their scale subresource (`adapters.cluster.KubeClusterApi`; a fake in the unit tests)."""

    async def workloads(self) -> Listed[ScalableWorkload]:
        """The Deployments and StatefulSets, in all namespaces, that ask to be autoscaled
        (`gpupool.io/autoscale`), decoded."""
        ...

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> bool:
        """Set spec.replicas through the scale subresource; False when it is gone."""
        ...

    async def annotate(self, kind: str, namespace: str, name: str, key: str, value: str) -> bool:
        """Set one annotation on the workload; False when it is gone."""
        ...

    async def workload_event(
        self,
        about: ObjectReference,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None: ...
