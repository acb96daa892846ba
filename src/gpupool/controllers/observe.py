"""What the controller shows on /metrics, taken from the last admission round.

`MetricsObserver.observe` turns the admission round (its pods, GpuLeases, GpuQuotas and quota
decision: the numbers GpuQuota status shows) into the quota layer's reading, and keeps the same
snapshot the extender and reclaim use (`state.ClusterCache`, `controllers.cards`: synced from
the round's Nodes, GpuNodes and GpuLeases by what changed, not rebuilt each round) for the
cards' allocated bytes and fragmentation (computed again only when the snapshot or the pods'
requests changed), and audits the live leases' charges against the
GpuNodes' cards (`leases.charge_audit`: the tenants' leases charged other than what they hold).
Nothing here decides or writes to the cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from gpupool.adapters.metrics.controller import (
    Admission,
    BudgetReading,
    CardReading,
    ControllerMetrics,
    ControllerReading,
    TenantReading,
)
from gpupool.adapters.metrics.fragmentation import card_fragmentation
from gpupool.controllers.admission.plan import TenantStatus
from gpupool.controllers.admission.reconcile import AdmissionRound
from gpupool.controllers.cards import CardState
from gpupool.controllers.leases.charge_audit import CardSizes
from gpupool.controllers.leases.charge_reconcile import audit_of
from gpupool.ports import ClusterApi
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject, NodeObject

GIB = 1024**3


def tenant_readings(
    tenants: Sequence[TenantStatus],
    quotas: Iterable[TenantQuota],
    leases: Iterable[LeaseRecord],
    now: float,
) -> tuple[TenantReading, ...]:
    by_name = {q.name: q for q in quotas}
    gib_hours: dict[str, float] = {}
    for lease in leases:
        hours = lease.accounting(now).gib_hours(now)
        gib_hours[lease.tenant] = gib_hours.get(lease.tenant, 0.0) + hours
    out = []
    for t in tenants:
        quota = by_name.get(t.tenant)
        oldest = min((q.pod.submitted_at for q in t.queue), default=now)
        out.append(
            TenantReading(
                tenant=t.tenant,
                resource=t.resource.value,
                nominal=quota.nominal if quota else 0,
                guaranteed=quota.guaranteed if quota else 0,
                used=t.used,
                borrowed=t.borrowed,
                lent=t.lent,
                pods=t.pods,
                queued=len(t.queue),
                oldest_wait_s=max(0.0, now - oldest),
                gib_hours=gib_hours.get(t.tenant, 0.0),
            )
        )
    return tuple(out)


def card_readings(
    nodes: Sequence[NodeObject],
    gpunodes: Sequence[GpuNodeObject],
    round_: AdmissionRound,
    cards: CardState | None = None,
) -> tuple[CardReading, ...]:
    """Each card's bytes and fragmentation. `cards`: the snapshot kept between rounds (synced
    by what changed); None: one built for this call."""
    cards = cards if cards is not None else CardState()
    snap = cards.sync(list(nodes), list(gpunodes), round_.leases)
    requests = tuple(v.request for v in round_.pods if v.request is not None and not v.terminal)
    key = (cards.cache.generation, requests)
    if cards.readings is not None and cards.readings[0] == key:
        return cards.readings[1]  # nothing they read changed since the last round
    frag = card_fragmentation(snap, list(requests))
    out = []
    for i, node in enumerate(snap.nodes):
        for slot, gpu in enumerate(node.gpus):
            out.append(
                CardReading(
                    node=node.name,
                    gpu=gpu.index,
                    uuid=gpu.uuid,
                    model=gpu.model,
                    total_bytes=int(snap.gmem_total[i, slot]),
                    allocated_bytes=int(snap.gmem_total[i, slot] - snap.gmem_free[i, slot]),
                    fragmentation=float(frag[i, slot]),
                )
            )
    cards.readings = (key, tuple(out))
    return cards.readings[1]


def budget_readings(round_: AdmissionRound) -> tuple[BudgetReading, ...]:
    """The budgets as the admission round metered them (the same pure plan, the same numbers
    as GpuQuota status)."""
    statuses = round_.budgets
    return tuple(
        BudgetReading(s.tenant, s.unit, s.limit, s.used, s.remaining)
        for _, s in sorted(statuses.items())
    )


def charge_readings(
    round_: AdmissionRound, gpunodes: Sequence[GpuNodeObject], sizes: CardSizes | None = None
) -> tuple[tuple[str, int], ...]:
    """Per tenant, its live leases charged other than what they hold: every tenant the round
    knows (from its quotas and its live leases) with 0 when all of its leases agree."""
    live = [le for le in round_.leases if le.holds_capacity]
    tenants = {t.tenant for t in round_.plan.tenants} | {le.tenant for le in live}
    return audit_of(live, gpunodes, sizes).by_tenant(tenants)


def admissions_of(round_: AdmissionRound) -> tuple[Admission, ...]:
    """The pods the round admitted, each with its tenant and wait."""
    return tuple(
        Admission(a.pod.tenant, a.borrowed > 0, round_.now - a.pod.submitted_at)
        for a in round_.plan.admit
    )


def reading_of(
    round_: AdmissionRound,
    nodes: Sequence[NodeObject],
    gpunodes: Sequence[GpuNodeObject],
    cards: CardState | None = None,
    sizes: CardSizes | None = None,
) -> ControllerReading:
    phases = Counter(le.phase.value for le in round_.leases)
    health = Counter(g.health for g in gpunodes)
    return ControllerReading(
        tenants=tenant_readings(round_.plan.tenants, round_.quotas, round_.leases, round_.now),
        cards=card_readings(nodes, gpunodes, round_, cards),
        leases_by_phase=tuple(sorted(phases.items())),
        budgets=budget_readings(round_),
        nodes_by_health=tuple(sorted(health.items())),
        charge_mismatches=charge_readings(round_, gpunodes, sizes),
    )


class MetricsObserver:
    """The controller runs `admitted` after every admission round (counters must see each) and
    `show` at most every few seconds (`OBSERVE_GAP_S`): the gauges, the cards' fragmentation and
    the charge audit cost a pass over every card, and their readers look only at scrapes."""

    def __init__(self, api: ClusterApi, metrics: ControllerMetrics) -> None:
        self.api = api
        self.metrics = metrics
        self.cards = CardState()  # the cards' snapshot, kept between rounds
        self.sizes = CardSizes()  # the cards' sizes for the charge audit, kept between rounds

    def admitted(self, round_: AdmissionRound) -> None:
        """Counts the round's admissions and their waits."""
        self.metrics.admitted(admissions_of(round_))

    async def show(self, round_: AdmissionRound) -> ControllerReading:
        """Shows the round's state on /metrics (its admissions are `admitted`'s); returns the
        reading (GpuPool status uses its cards)."""
        # what does not decode is left out here: the admission loop sets it aside and says so
        nodes = (await self.api.nodes()).values
        gpunodes = (await self.api.gpu_nodes()).values
        reading = reading_of(round_, nodes, gpunodes, self.cards, self.sizes)
        self.metrics.observe(reading)
        return reading

    async def observe(self, round_: AdmissionRound) -> ControllerReading:
        """Both at once: the round counted and shown."""
        self.admitted(round_)
        return await self.show(round_)
