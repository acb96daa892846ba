"""The admission queue reconciler: removes the gpupool.io/quota gate from pods as quota admits,
in priority then FIFO order, and shows every waiting pod where it stands.

Each round reads the tenant pods and the GpuQuotas, lets `plan_admission` decide (pure), then:
- admits: one JSON patch per pod that tests the uid and the gate, removes the gate and writes
  `gpupool.io/admitted` (when, borrowed amount, preemptible, why) — the same patch, so a crash
  can never leave a pod admitted without the record quota counting needs; event `Admitted`;
- waiting pods: `gpupool.io/queue` = "position 2 of 3 in tenant 'a''s queue: <why>", and an
  event `Queued` (Warning `NotAdmittable` when it can never be admitted) whenever that changes;
- GpuQuota status: used, borrowed, lent, pods, queued and the head of the queue, and the
  budget's standing (`controllers.budget`: metered from the GpuLeases every round, the meter the
  admission decision uses, so a spent budget blocks or admits as preemptible).
Nothing is remembered between rounds. The round's reads and plan (`AdmissionRound`) go on to the
reclaim reconciler, which decides over the same snapshot and the same quota decision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire import names
from gpupool.adapters.wire.admitted import Admitted, admitted_annotation
from gpupool.adapters.wire.json_pointer import escape
from gpupool.adapters.wire.quotas import read_quota
from gpupool.controllers.admission.plan import (
    AdmissionPlan,
    AdmitPod,
    QueuedPod,
    TenantStatus,
    card_sizes_of,
    mark_borrowed,
    plan_admission,
)
from gpupool.controllers.budget.plan import plan_budgets
from gpupool.controllers.budget.status import budget_status_json
from gpupool.controllers.reads import read_leases
from gpupool.domain.devices import Gpu
from gpupool.domain.errors import GpupoolError
from gpupool.ports import Clock, ClusterApi, Json
from gpupool.quota.budget import BudgetStatus
from gpupool.quota.queue import FifoMode
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import node_of
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.admission")

QUEUE_STATUS_ITEMS = 100
NOT_ADMITTABLE = ("REJECTED", "NO_QUOTA", "UNREADABLE", "GANG_CONFLICT")


def admit_patch(pod: Json, admit: AdmitPod, now: float) -> list[Json]:
    """The JSON patch that admits a pod: checks it is the same pod still gated, then ungates it."""
    view = admit.pod
    annotations = (pod.get("metadata") or {}).get("annotations")
    record = admitted_annotation(
        Admitted(now, admit.borrowed, admit.preemptible, admit.resource, admit.amount),
        admit.reason,
    )
    patch: list[Json] = [
        {"op": "test", "path": "/metadata/uid", "value": view.uid},
        {
            "op": "test",
            "path": f"/spec/schedulingGates/{view.gate_index}/name",
            "value": names.QUOTA_GATE,
        },
        {"op": "remove", "path": f"/spec/schedulingGates/{view.gate_index}"},
    ]
    if annotations is None:
        patch.append(
            {"op": "add", "path": "/metadata/annotations", "value": {names.ANN_ADMITTED: record}}
        )
    else:
        base = "/metadata/annotations/"
        patch.append({"op": "add", "path": base + escape(names.ANN_ADMITTED), "value": record})
        if names.ANN_QUEUE in annotations:
            patch.append({"op": "remove", "path": base + escape(names.ANN_QUEUE)})
    return patch


def quota_status(status: TenantStatus, generation: int | None) -> Json:
    fmt = status.resource.format
    out: Json = {
        "used": fmt(status.used),
        "usedAmount": status.used,
        "borrowed": fmt(status.borrowed),
        "borrowedAmount": status.borrowed,
        "lent": fmt(status.lent),
        "lentAmount": status.lent,
        "pods": status.pods,
        "queued": len(status.queue),
        "queue": [
            {
                "namespace": q.pod.namespace,
                "name": q.pod.name,
                "position": q.position,
                "reason": q.detail,
            }
            for q in status.queue[:QUEUE_STATUS_ITEMS]
        ],
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def read_quotas(objects: list[Json]) -> tuple[list[TenantQuota], dict[str, str]]:
    quotas: list[TenantQuota] = []
    problems: dict[str, str] = {}
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            quotas.append(read_quota(obj))
        except GpupoolError as err:
            problems[name] = f"GpuQuota {name!r} is invalid, so nothing is admitted: {err}"
    return quotas, problems


@dataclass(frozen=True, slots=True)
class AdmissionRound:
    """One admission round: what it read (decoded once) and what it decided and applied."""

    plan: AdmissionPlan
    pods: tuple[PodView, ...]  # borrowed marks taken from the live leases (`mark_borrowed`)
    raw: Mapping[str, Json]  # pod key -> the pod's JSON (events, patches that test it)
    leases: tuple[LeaseRecord, ...]
    quotas: tuple[TenantQuota, ...]
    now: float
    budgets: Mapping[str, BudgetStatus] = field(default_factory=dict)  # tenants with a budget


class AdmissionReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        *,
        mode: FifoMode = FifoMode.BEST_EFFORT,
    ) -> None:
        self.api = api
        self.clock = clock
        self.mode = mode

    async def reconcile(self) -> AdmissionRound:
        pods = await self.api.tenant_pods()
        quota_objects = await self.api.quotas()
        leases = read_leases(await self.api.leases(), log)
        now = self.clock()
        quotas, problems = read_quotas(quota_objects)
        views = mark_borrowed([read_pod(p) for p in pods], leases)
        raw = {v.key: p for v, p in zip(views, pods, strict=True)}
        budgets = plan_budgets(quotas, leases, now)
        cards = await self._cards()
        plan = plan_admission(
            views,
            quotas,
            now,
            default_tenant=names.DEFAULT_TENANT,
            mode=self.mode,
            meter=budgets.meter,
            quota_problems=problems,
            card_sizes=card_sizes_of(cards),
        )
        stamp = format_time(now)
        for admit in plan.admit:
            pod = raw[admit.pod.key]
            if await self.api.patch_pod(
                admit.pod.namespace, admit.pod.name, admit_patch(pod, admit, now), json_patch=True
            ):
                log.info("admitted %s: %s", admit.pod.key, admit.reason)
                await self.api.event(pod, "Admitted", admit.reason, now_rfc3339=stamp)
        for queued in plan.queued:
            await self._show(raw[queued.pod.key], queued, stamp)
        generations = {
            str(q["metadata"]["name"]): q["metadata"].get("generation") for q in quota_objects
        }
        current = {str(q["metadata"]["name"]): q.get("status") or {} for q in quota_objects}
        for tenant in plan.tenants:
            if tenant.tenant not in generations:
                continue  # the implicit `default` tenant has no object to report on
            status = quota_status(tenant, generations[tenant.tenant])
            status |= budget_status_json(budgets.statuses.get(tenant.tenant))
            if not _same(current[tenant.tenant], status):
                await self.api.patch_quota_status(tenant.tenant, status)
        return AdmissionRound(
            plan, tuple(views), raw, tuple(leases), tuple(quotas), now, budgets.statuses
        )

    async def _cards(self) -> list[Gpu]:
        """The cluster's cards (a node whose cards cannot be read adds none)."""
        gpunodes = {g.name: g for g in map(read_gpu_node, await self.api.gpu_nodes())}
        cards: list[Gpu] = []
        for obj in await self.api.nodes():
            try:
                node = read_node(obj)
                cards.extend(node_of(node, gpunodes.get(node.name)).gpus)
            except GpupoolError:
                continue
        return cards

    async def _show(self, pod: Json, queued: QueuedPod, stamp: str) -> None:
        note = queued.note
        if queued.pod.queue_note == note:
            return
        patch = {"metadata": {"annotations": {names.ANN_QUEUE: note}}}
        if await self.api.patch_pod(queued.pod.namespace, queued.pod.name, patch, json_patch=False):
            stuck = queued.reason in NOT_ADMITTABLE
            await self.api.event(
                pod,
                "NotAdmittable" if stuck else "Queued",
                note,
                warning=stuck,
                now_rfc3339=stamp,
            )


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(current.get(k) == v for k, v in wanted.items())
