"""A fixed cluster state for the views' tests, as the typed values the adapters decode: three
nodes of four 72Gi cards (one suspect), two tenants in one cohort with quotas and the status the
controller wrote, live and ended leases, pods waiting at the quota gate and for a card; and a
generated 1,000-node pool."""

from __future__ import annotations

import random

from gpupool.domain.allocations import Slice
from gpupool.domain.devices import Gpu
from gpupool.domain.requests import Request
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.quota.spec import Budget, TenantQuota
from gpupool.state.admitted import Admitted
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.pods import PodView
from gpupool.state.views.inputs import QueueEntry, QuotaStatus
from gpupool.state.views.status import ViewInputs

NOW = 1_800_000_000.0
CARD = 72 * GiB


def gpunode(name: str, cards: int = 4, health: str = "Healthy") -> GpuNodeObject:
    gpus = tuple(Gpu(i, "A100-80GB", f"GPU-{name}-{i}", CARD) for i in range(cards))
    detail = "no heartbeat for 95s" if health != "Healthy" else ""
    return GpuNodeObject(name=name, gpus=gpus, health=health, health_detail=detail)


def lease(
    tenant: str,
    pod: str,
    node: str,
    cards: list[tuple[int, int, int]],  # (gpu index, offset GiB, size GiB)
    *,
    age_s: float = 600.0,
    phase: LeasePhase = LeasePhase.ACTIVE,
    borrowed: int = 0,
    end: float | None = None,
    ns: str | None = None,
) -> LeaseRecord:
    namespace = ns or tenant
    slices = tuple(
        Slice(i, f"GPU-{node}-{i}", "A100-80GB", off * GiB, size * GiB, 0) for i, off, size in cards
    )
    return LeaseRecord(
        name=f"uid-{pod}",
        namespace=namespace,
        tenant=tenant,
        pod=PodRef(namespace, pod, f"uid-{pod}"),
        node=node,
        slices=slices,
        amount=sum(s.size_bytes for s in slices),
        borrowed=borrowed,
        phase=phase,
        start=NOW - age_s,
        end=end,
    )


def pod(
    tenant: str,
    name: str,
    gib: int,
    *,
    gated: bool,
    waited_s: float = 60.0,
    node: str | None = None,
    note: str | None = None,
    unschedulable: bool = False,
) -> PodView:
    return PodView(
        namespace=tenant,
        name=name,
        uid=f"uid-{name}",
        tenant=tenant,
        priority=0,
        submitted_at=NOW - waited_s,
        request=Request(name=name, gpu_count=1, gpu_memory_bytes=gib * GiB),
        problem=None,
        gated=gated,
        gate_index=0 if gated else -1,
        phase="Pending" if node is None else "Running",
        deleting=False,
        node=node,
        admitted=None if gated else Admitted(NOW - waited_s),
        queue_note=note,
        unschedulable=unschedulable,
    )


def small_pool() -> ViewInputs:
    names = ("gpu-node-a", "gpu-node-b", "gpu-node-c")
    leases = [
        lease("team-a", "infer-1", "gpu-node-a", [(0, 0, 12)], age_s=3600),
        lease("team-a", "infer-2", "gpu-node-a", [(0, 12, 12)], age_s=1800),
        lease("team-a", "notebook", "gpu-node-a", [(1, 0, 18)], phase=LeasePhase.BOUND),
        lease("team-b", "train-0", "gpu-node-b", [(0, 0, 72), (1, 0, 72)], borrowed=72 * GiB),
        lease(
            "team-b",
            "old-job",
            "gpu-node-b",
            [(2, 0, 24)],
            age_s=5400,
            phase=LeasePhase.RELEASED,
            end=NOW - 1800,
        ),
    ]
    quotas = [
        TenantQuota(
            "team-a",
            nominal=80 * GiB,
            guaranteed=40 * GiB,
            cohort="research",
            budget=Budget(limit=500.0, window_s=86400.0),
        ),
        TenantQuota("team-b", nominal=72 * GiB, cohort="research"),
    ]
    statuses = {
        "team-a": QuotaStatus(
            used=42 * GiB,
            lent=38 * GiB,
            pods=3,
            queued=2,
            queue=(QueueEntry("team-a", "big-train", 1, "needs 40Gi, 38Gi of nominal left"),),
            hours_used=61.5,
        ),
        "team-b": QuotaStatus(used=144 * GiB, borrowed=72 * GiB, pods=1, queued=0),
    }
    pods = [
        pod("team-a", "big-train", 40, gated=True, waited_s=300),
        pod("team-a", "late-one", 8, gated=True, waited_s=5, note=None),
        pod("team-b", "eval", 60, gated=False, waited_s=120, unschedulable=True),
        pod("team-a", "infer-1", 12, gated=False, node="gpu-node-a"),
    ]
    return ViewInputs(
        nodes=[NodeObject(n) for n in names],
        gpunodes=[gpunode(n, health="Suspect" if n.endswith("c") else "Healthy") for n in names],
        leases=leases,
        quotas=quotas,
        statuses=statuses,
        pods=pods,
    )


def big_pool(nodes: int = 1000, seed: int = 7) -> ViewInputs:
    """`nodes` nodes of 8 cards; about a third of the cards hold one to three slices."""
    rng = random.Random(seed)
    tenants = [f"tenant-{i:02d}" for i in range(12)]
    names = [f"pool-{i // 100:02d}-node-{i:04d}" for i in range(nodes)]
    leases = []
    for n in names:
        for card in range(8):
            if rng.random() > 0.35:
                continue
            offset = 0
            for k in range(rng.randint(1, 3)):
                size = rng.choice((4, 8, 12, 16, 24))
                if offset + size > 72:
                    break
                t = rng.choice(tenants)
                leases.append(lease(t, f"{n}-{card}-{k}", n, [(card, offset, size)]))
                offset += size
    return ViewInputs(
        nodes=[NodeObject(n) for n in names],
        gpunodes=[
            gpunode(n, 8, "Lost" if i % 250 == 3 else "Healthy") for i, n in enumerate(names)
        ],
        leases=leases,
        quotas=[TenantQuota(t, nominal=2048 * GiB) for t in tenants],
    )
