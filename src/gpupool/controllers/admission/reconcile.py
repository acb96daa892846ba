"""The admission queue reconciler: removes the gpupool.io/quota gate from pods as quota admits,
in priority then FIFO order, and shows every waiting pod where it stands.

Each round reads the tenant pods and the GpuQuotas, lets `plan_admission` decide (pure), then:
- admits: one write per pod (`ClusterApi.admit_pod`: a JSON patch that tests the uid and the
  gate) removes the gate and writes `gpupool.io/admitted` (when, borrowed amount, preemptible,
  why) — the same patch, so a crash can never leave a pod admitted without the record quota
  counting needs; event `Admitted`;
- waiting pods: `gpupool.io/queue` = "position 2 of 3 in tenant 'a''s queue: <why>", and an
  event `Queued` (Warning `NotAdmittable` when it can never be admitted) whenever that changes;
- GpuQuota status: used, borrowed, lent, pods, queued and the head of the queue, and the
  budget's standing (`controllers.budget`: metered from the GpuLeases every round, the meter the
  admission decision uses, so a spent budget blocks or admits as preemptible).
Between rounds the reconciler keeps only values made from the very same objects (borrowed marks:
`admission.charge.BorrowedMarks`; charges: `KeptCharges`; core leases: `controllers.kept`; each
group of tenants' plan while it would be made the same: `admission.groups`) and the objects set
aside (`controllers.contain`): a pod, GpuQuota, Node or GpuNode that cannot be read, a tenant
whose plan raises (the plan is per tenant, so the other tenants are planned without it; cohort
borrowing sees the cohort less that tenant), a pod or GpuQuota whose write fails: each is set
aside with a ReconcileFailed event and retried with backoff while the round goes on for the
others. The round's reads and plan (`AdmissionRound`) go on to the reclaim reconciler, which
decides over the same snapshot and the same quota decision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from gpupool.adapters.wire import names
from gpupool.adapters.wire.admitted import Admitted, admitted_annotation
from gpupool.controllers.admission.charge import (
    BorrowedMarks,
    KeptCharges,
    card_sizes_of,
    mark_borrowed,
)
from gpupool.controllers.admission.groups import GroupPlans, tenant_groups
from gpupool.controllers.admission.plan import (
    AdmissionPlan,
    AdmitPod,
    QueuedPod,
    TenantStatus,
    plan_admission,
)
from gpupool.controllers.budget.plan import plan_budgets
from gpupool.controllers.budget.status import budget_fields
from gpupool.controllers.contain import Containment, quota_ref
from gpupool.controllers.kept import Kept
from gpupool.controllers.reads import READ, decode_leases, decode_pods
from gpupool.domain.devices import Gpu
from gpupool.domain.errors import GpupoolError
from gpupool.ports import Clock, ClusterApi
from gpupool.quota.budget import BudgetStatus
from gpupool.quota.lease import Lease
from gpupool.quota.queue import FifoMode
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed, ObjectReference
from gpupool.state.nodes import GpuNodeObject, NodeObject, node_of
from gpupool.state.pods import PodView
from gpupool.state.quota_object import QuotaObject
from gpupool.state.status_writes import BudgetFields, QueueLine, QuotaStatusWrite

log = logging.getLogger("gpupool.controller.admission")

LOOP = "admission+reclaim"

QUEUE_STATUS_ITEMS = 100
NOT_ADMITTABLE = ("REJECTED", "NO_QUOTA", "UNREADABLE", "GANG_CONFLICT")


def admitted_record(admit: AdmitPod, now: float) -> str:
    """The pod's `gpupool.io/admitted` record (when, borrowed amount, preemptible, why)."""
    return admitted_annotation(
        Admitted(now, admit.borrowed, admit.preemptible, admit.resource, admit.amount),
        admit.reason,
    )


def quota_status(
    status: TenantStatus, generation: int | None, budget: BudgetFields | None = None
) -> QuotaStatusWrite:
    """The tenant's GpuQuota status: amounts as their resource writes them, the queue's head."""
    fmt = status.resource.format
    return QuotaStatusWrite(
        used=fmt(status.used),
        used_amount=status.used,
        borrowed=fmt(status.borrowed),
        borrowed_amount=status.borrowed,
        lent=fmt(status.lent),
        lent_amount=status.lent,
        pods=status.pods,
        queued=len(status.queue),
        queue=tuple(
            QueueLine(q.pod.namespace, q.pod.name, q.position, q.detail)
            for q in status.queue[:QUEUE_STATUS_ITEMS]
        ),
        observed_generation=generation,
        budget=budget,
    )


def read_quotas(
    listed: Listed[QuotaObject], contain: Containment | None = None, now: float = 0.0
) -> tuple[list[TenantQuota], dict[str, str]]:
    """The quotas that read, and the problem of each that does not (its tenant admits
    nothing). With `contain`, a quota that did not decode (other than as invalid) is set aside."""
    read = list(listed.read) if contain is None else contain.decode(READ, "GpuQuota", listed, now)
    quotas = [q.quota for q, _ in read if q.quota is not None]
    problems = {
        q.name: f"GpuQuota {q.name!r} is invalid, so nothing is admitted: {q.invalid}"
        for q, _ in read
        if q.quota is None
    }
    got = {q.name for q, _ in read}
    for ref in [r for _, r in listed.read] + [u.ref for u in listed.unreadable]:
        if ref.name not in got:
            problems[ref.name] = (
                f"GpuQuota {ref.name!r} could not be read, so nothing is admitted for now (its "
                f"ReconcileFailed event says why)"
            )
    return quotas, problems


@dataclass(frozen=True, slots=True)
class AdmissionRound:
    """One admission round: what it read (decoded once) and what it decided and applied."""

    plan: AdmissionPlan
    pods: tuple[PodView, ...]  # borrowed marks taken from the live leases (`mark_borrowed`)
    refs: Mapping[str, ObjectReference]  # pod key -> the pod's reference (events)
    leases: tuple[LeaseRecord, ...]
    quotas: tuple[TenantQuota, ...]
    now: float
    budgets: Mapping[str, BudgetStatus] = field(default_factory=dict)  # tenants with a budget


class BeforeAdmit(Protocol):
    """What must be done before an admitted pod's gate lifts (`controllers.dra`: a claim pod's
    claim allocated and leased); False keeps the pod gated this round."""

    async def ready(self, pod: ObjectReference, admit: AdmitPod, now: float) -> bool: ...


class AdmissionReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        *,
        mode: FifoMode = FifoMode.BEST_EFFORT,
        contain: Containment | None = None,
        claims: BeforeAdmit | None = None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.mode = mode
        self.claims = claims
        self.contain = contain if contain is not None else Containment(LOOP, api)
        # kept between rounds while made from the same objects: the pods' borrowed marks, and
        # (`controllers.kept`) the leases' core leases the budget meter counts
        self._marks = BorrowedMarks()
        self._accounts: Kept[Lease] = Kept()
        self._charges = KeptCharges()  # the admitted pods' charges (the ledger's)
        self._groups = GroupPlans()  # each group of tenants' last plan (`admission.groups`)
        # node -> (its Node, its GpuNode, their cards) as decoded last round: the decoders give
        # the same objects for an unchanged version, so an unchanged node's cards are reused
        self._node_cards: dict[str, tuple[NodeObject, GpuNodeObject | None, tuple[Gpu, ...]]] = {}
        self._sizes: dict[str, int] | None = None  # card_sizes_of those cards
        # the GpuNodes and Nodes read last (the same objects while the watch cache's are)
        self._read_last: tuple[Listed[GpuNodeObject], Listed[NodeObject]] | None = None

    async def reconcile(self) -> AdmissionRound:
        now = self.clock()
        try:
            return await self._reconcile(now)
        finally:
            await self.contain.report(now)

    async def _reconcile(self, now: float) -> AdmissionRound:
        contain = self.contain
        read = decode_pods(contain, await self.api.tenant_pods(), now)
        quota_objects = await self.api.quotas()
        leases = decode_leases(contain, await self.api.leases(), now)
        quotas, problems = read_quotas(quota_objects, contain, now)
        views = mark_borrowed([v for v, _ in read], leases, self._marks)
        refs = {v.key: ref for v, (_, ref) in zip(views, read, strict=True)}
        budgets = contain.plan(
            "budget", "GpuQuota", quotas, lambda q: q.name,
            lambda some: plan_budgets(some, leases, now, self._accounts), now,
            lambda q: quota_ref(q.name),
        )  # fmt: skip
        sizes = await self._card_sizes(now)
        tenants = sorted(
            {q.name for q in quotas} | set(problems) | {v.tenant for v in views}
            | {names.DEFAULT_TENANT}
        )  # fmt: skip

        def plan_group(
            pods: Sequence[PodView], some: Sequence[TenantQuota], said: Mapping[str, str]
        ) -> AdmissionPlan:
            return plan_admission(
                pods,
                some,
                now,
                default_tenant=names.DEFAULT_TENANT,
                mode=self.mode,
                meter=budgets.meter,
                quota_problems=said,
                card_sizes=sizes,
                charged=self._charges,
            )

        def plan_for(some: Sequence[str]) -> AdmissionPlan:
            chosen = set(some)
            mine = [v for v in views if v.tenant in chosen]
            theirs = [q for q in quotas if q.name in chosen]
            groups = tenant_groups(chosen, theirs, mine)
            said = {t: p for t, p in problems.items() if t in chosen}
            return self._groups.plan(groups, mine, theirs, said, sizes, plan_group)

        # Planned per group of tenants that sway each other (a cohort; `admission.groups`), a
        # group's last plan kept while it would be made the same; a tenant whose plan raises is
        # set aside and the others are planned without it.
        plan = contain.plan("plan", "GpuQuota", tenants, str, plan_for, now, quota_ref)
        self._groups.round_done()
        self._charges.pass_done()
        stamp = format_time(now)
        for admit in plan.admit:
            pod = refs[admit.pod.key]
            await contain.handle("admit", pod, partial(self._admit, pod, admit, now, stamp), now)
        for queued in plan.queued:
            pod = refs[queued.pod.key]
            await contain.handle("queue", pod, partial(self._show, pod, queued, stamp), now)
        by_name = {q.name: (q, ref) for q, ref in quota_objects.read}
        for tenant in plan.tenants:
            if tenant.tenant not in by_name:
                continue  # the implicit `default` tenant has no object to report on
            quota, ref = by_name[tenant.tenant]
            budget = budget_fields(budgets.statuses.get(tenant.tenant))
            status = quota_status(tenant, quota.generation, budget)
            if not status.same_as(quota_objects.status_of(ref.key).quota):
                await contain.handle("status", ref,
                                     partial(self.api.patch_quota_status, tenant.tenant, status),
                                     now)  # fmt: skip
        return AdmissionRound(
            plan, tuple(views), refs, tuple(leases), tuple(quotas), now, budgets.statuses
        )

    async def _admit(self, pod: ObjectReference, admit: AdmitPod, now: float, stamp: str) -> None:
        if self.claims is not None and not await self.claims.ready(pod, admit, now):
            return
        if await self.api.admit_pod(admit.pod, admitted_record(admit, now)):
            log.info("admitted %s: %s", admit.pod.key, admit.reason)
            await self.api.event(pod, "Admitted", admit.reason, now_rfc3339=stamp)

    async def _card_sizes(self, now: float) -> Mapping[str, int]:
        """The cluster's card sizes by model, computed again only when a node's cards changed.
        When the reads are the very lists of the last round (the watch cache's kinds did not
        change) and nothing is set aside, the last round's sizes stand without a pass over the
        nodes: at 5,000 nodes that pass was most of an admission round."""
        gpunodes, nodes = await self.api.gpu_nodes(), await self.api.nodes()
        last = self._read_last
        if (
            self._sizes is not None
            and not self.contain.book
            and last is not None
            and last[0] is gpunodes
            and last[1] is nodes
        ):
            return self._sizes
        self._read_last = (gpunodes, nodes)
        before = self._node_cards
        cards = self._cards(gpunodes, nodes, now)
        same = before.keys() == self._node_cards.keys() and all(
            before[n][2] is self._node_cards[n][2] for n in before
        )
        if not same or self._sizes is None:
            self._sizes = card_sizes_of(cards)
        return self._sizes  # the same object while the cards are: the charges made from it stay

    def _cards(
        self, listed_gpunodes: Listed[GpuNodeObject], listed_nodes: Listed[NodeObject], now: float
    ) -> list[Gpu]:
        """The cluster's cards (a node whose cards cannot be read adds none; a Node or GpuNode
        that cannot be decoded is set aside)."""
        read = self.contain.decode(READ, "GpuNode", listed_gpunodes, now)
        gpunodes = {g.name: g for g, _ in read}
        cards: list[Gpu] = []
        kept: dict[str, tuple[NodeObject, GpuNodeObject | None, tuple[Gpu, ...]]] = {}
        for node, _ in self.contain.decode(READ, "Node", listed_nodes, now):
            gpunode = gpunodes.get(node.name)
            last = self._node_cards.get(node.name)
            if last is not None and last[0] is node and last[1] is gpunode:
                gpus = last[2]  # the same decoded objects as last round: the same cards
            else:
                try:
                    gpus = node_of(node, gpunode).gpus
                except GpupoolError:
                    gpus = ()
            kept[node.name] = (node, gpunode, gpus)
            cards.extend(gpus)
        self._node_cards = kept
        return cards

    async def _show(self, pod: ObjectReference, queued: QueuedPod, stamp: str) -> None:
        note = queued.note
        if queued.pod.queue_note == note:
            return
        if await self.api.annotate_pod(queued.pod, {names.ANN_QUEUE: note}, same_uid=False):
            stuck = queued.reason in NOT_ADMITTABLE
            await self.api.event(
                pod,
                "NotAdmittable" if stuck else "Queued",
                note,
                warning=stuck,
                now_rfc3339=stamp,
            )
