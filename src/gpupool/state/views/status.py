"""Everything `gpupool status` shows, in one value (`StatusView`), from one read of the cluster
(`ViewInputs`). `scope` says what the caller could see: all of it, or only some namespaces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupool.placement.fragmentation import CommonSizes
from gpupool.quota.spec import TenantQuota
from gpupool.state.cluster import ClusterCache, lease_request
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.pods import PodView
from gpupool.state.views.errors import UnknownNode, UnknownTenant
from gpupool.state.views.inputs import QuotaStatus
from gpupool.state.views.leases import LeasesView, build_leases
from gpupool.state.views.pool import PoolView, build_pool
from gpupool.state.views.queue import QueueItem, build_queue
from gpupool.state.views.tenants import TenantView, build_tenants


@dataclass(frozen=True, slots=True)
class ViewInputs:
    """One read of the cluster, decoded. `namespaces` is None when the caller read cluster-wide;
    else the namespaces it was limited to (the pool's nodes are then unknown to it)."""

    nodes: Sequence[NodeObject] = ()
    gpunodes: Sequence[GpuNodeObject] = ()
    leases: Sequence[LeaseRecord] = ()
    quotas: Sequence[TenantQuota] = ()
    statuses: dict[str, QuotaStatus] = field(default_factory=dict)
    pods: Sequence[PodView] = ()
    pods_visible: bool = True  # False: the caller may not list pods (only the quotas' queues)
    namespaces: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()  # what the read could not see, and why


@dataclass(frozen=True, slots=True)
class StatusView:
    now: float
    pool: PoolView
    tenants: tuple[TenantView, ...]
    queue: tuple[QueueItem, ...]
    leases: LeasesView
    namespaces: tuple[str, ...] | None
    notes: tuple[str, ...]

    def check_node(self, name: str) -> None:
        node = self.pool.node(name)
        if node is None:
            known = ", ".join(n.name for n in self.pool.nodes[:5]) or "none visible to you"
            raise UnknownNode(
                f"no GPU node named {name!r} (nodes: {known}"
                f"{', ...' if len(self.pool.nodes) > 5 else ''}); `gpupool status` lists them"
            )

    def check_tenant(self, name: str) -> None:
        if not any(t.name == name for t in self.tenants):
            known = ", ".join(t.name for t in self.tenants) or "none visible to you"
            raise UnknownTenant(
                f"no tenant named {name!r} has a quota, a lease or a waiting pod (tenants: {known})"
            )


def build_status(inputs: ViewInputs, now: float) -> StatusView:
    """The views of one read. Fragmentation is measured against the request sizes of the leases
    read (live and ended: the recent requests), as defragmentation measures it."""
    cache = ClusterCache()
    cache.rebuild(inputs.nodes, inputs.gpunodes, inputs.leases)
    sizes = CommonSizes.learn(lease_request(x) for x in inputs.leases if x.slices)
    pool = build_pool(cache, sizes)
    leases = build_leases(inputs.leases, now)
    queue = build_queue(inputs.pods, inputs.statuses, now, pods_visible=inputs.pods_visible)
    tenants = build_tenants(inputs.quotas, inputs.statuses, leases, queue)
    return StatusView(now, pool, tenants, queue, leases, inputs.namespaces, inputs.notes)
