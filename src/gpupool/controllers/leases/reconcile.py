"""The lease lifecycle reconciler: moves GpuLeases through their phases from their pods' state,
releases and meters them when their pod finishes or is gone, ends expired ones, collects ended
ones after a retention period, and sweeps stale reservations (`leases.plan` decides; this applies
it); it also gives leases their expiry, renews them, and notices and evicts the pods of expired
ones (`leases.expiry`, applied by `leases.expiry_reconcile`), and reconciles the leases against
the pods (`leases.restore` decides): a bound GPU pod whose lease is gone gets it made again from
its allocation annotation, or, when that cannot be trusted, is fenced (deleted); each repair is a
Warning event on the pod, a log line and a call of `on_integrity` with the event's reason (the
controller counts them), and so is a bound GPU pod that holds capacity without an admission
record. Each round it also audits the live leases' charges (`leases.charge_audit` decides,
`leases.charge_reconcile` writes): a lease charged other than what its slices hold gets a
ChargeMismatch Warning event on it and its pod, once (also counted through `on_integrity`); the
audit never stops the round. A write that fails (the API server answers an error) raises: the
manager logs it and the next round plans the same move again from what the API server holds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.lease import lease_to_json, phase_name
from gpupool.adapters.kubernetes.pod_view import read_pod
from gpupool.adapters.wire.quotas import read_quota
from gpupool.controllers.leases.charge_reconcile import ChargeReporter, audit_of
from gpupool.controllers.leases.expiry import plan_expiry
from gpupool.controllers.leases.expiry_reconcile import apply_expiry, tenant_terms
from gpupool.controllers.leases.plan import (
    RESERVED_TIMEOUT_S,
    LeasePlan,
    Move,
    plan_leases,
)
from gpupool.controllers.leases.restore import RestorePlan, plan_restores
from gpupool.controllers.reads import read_leases
from gpupool.domain.errors import GpupoolError
from gpupool.ports import Clock, ClusterApi, Json, Outcomes
from gpupool.quota.spec import Budget
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.leases")


def move_status(move: Move, now: float) -> Json:
    stamp = format_time(now)
    name = phase_name(move.phase)
    status: Json = {
        "phase": name,
        "conditions": [
            {
                "type": name,
                "status": "True",
                "reason": move.reason,
                "message": move.message,
                "lastTransitionTime": stamp,
            }
        ],
    }
    if move.to.bound_at is not None:
        status["boundAt"] = format_time(move.to.bound_at)
    if move.to.active_at is not None:
        status["activeAt"] = format_time(move.to.active_at)
    if move.to.ended_at is not None:
        status["end"] = format_time(move.to.ended_at)
    if move.gib_hours is not None:
        status["gibHours"] = round(move.gib_hours, 6)
    return status


def _budgets(quotas: list[Json]) -> dict[str, Budget]:
    """The tenants' budgets, so ended leases are kept while their window counts them (an
    unreadable quota keeps none: the admission reconciler reports it)."""
    out: dict[str, Budget] = {}
    for obj in quotas:
        try:
            quota = read_quota(obj)
        except GpupoolError:
            continue
        if quota.budget is not None:
            out[quota.name] = quota.budget
    return out


class LeaseReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        *,
        retention_s: float = 3600.0,
        reserved_timeout_s: float | None = RESERVED_TIMEOUT_S,
        on_integrity: Callable[[str], None] = lambda reason: None,
        outcomes: Outcomes | None = None,
    ) -> None:
        self.api = api
        # each integrity event written, by its reason (the controller's metrics count them)
        self.on_integrity = on_integrity
        self.outcomes = outcomes
        self.clock = clock
        self.retention_s = retention_s
        self.reserved_timeout_s = reserved_timeout_s
        self._reported: set[str] = set()  # uids reported unadmitted (one event per pod)
        self.charges = ChargeReporter(api, on_report=on_integrity)

    def _plan(self, leases: list[LeaseRecord], by_uid: dict[str, PodView], now: float,
              gone: frozenset[str] = frozenset(),
              budgets: Mapping[str, Budget] | None = None) -> LeasePlan:  # fmt: skip
        return plan_leases(
            leases,
            by_uid,
            now,
            retention_s=self.retention_s,
            reserved_timeout_s=self.reserved_timeout_s,
            known_gone=gone,
            budgets=budgets,
        )

    async def _expire(
        self,
        leases: list[LeaseRecord],
        pods: list[PodView],
        raw: list[Json],
        quotas: list[Json],
        now: float,
    ) -> None:
        """Expiry terms, renewals, expiry notices and evictions (`leases.expiry`), over the
        round's snapshot."""
        live = [le for le in leases if not le.phase.terminal]
        if not live:
            return
        tenants = tenant_terms(quotas)
        by_uid = {p.uid: p for p in pods}
        plan = plan_expiry(live, by_uid, tenants, now)
        by_key = {f"{(p.get('metadata') or {}).get('namespace')}/"
                  f"{(p.get('metadata') or {}).get('name')}": p for p in raw}  # fmt: skip
        await apply_expiry(self.api, plan, by_key, now, self.outcomes)

    async def reconcile(self) -> LeasePlan:
        raw_leases = await self.api.leases()
        leases = read_leases(raw_leases, log)
        raw_pods = await self.api.tenant_pods()
        pods = [read_pod(p) for p in raw_pods]
        quotas = await self.api.quotas()
        budgets = _budgets(quotas)
        await self.restore(leases, pods, raw_pods)
        await self.audit_charges(leases, raw_leases, raw_pods)
        by_uid = {p.uid: p for p in pods}
        now = self.clock()
        plan = self._plan(leases, by_uid, now, budgets=budgets)
        if plan.unsure:  # pods outside the tenant list: look each up before declaring it gone
            gone: set[str] = set()
            for lease in plan.unsure:
                pod = await self.api.pod(lease.pod.namespace, lease.pod.name)
                if pod is None or (pod.get("metadata") or {}).get("uid") != lease.pod.uid:
                    gone.add(lease.pod.uid)
                else:
                    by_uid[lease.pod.uid] = read_pod(pod)
            plan = self._plan(leases, by_uid, now, frozenset(gone), budgets)
        for move in plan.moves:
            lease = move.lease
            if await self.api.patch_lease_status(
                lease.namespace, lease.name, move_status(move, now)
            ):
                log.info("lease %s: %s (%s)", lease.key, phase_name(move.phase), move.message)
        await self._expire(leases, pods, raw_pods, quotas, now)
        for item in plan.collect:
            if await self.api.delete_lease(item.lease.namespace, item.lease.name):
                log.info("lease %s collected", item.lease.key)
        for lease in plan.sweep:
            # The snapshot may predate the pod's Binding: read it again; bound, it keeps the
            # lease (the next pass moves it to Bound).
            pod = await self.api.pod(lease.pod.namespace, lease.pod.name)
            meta = (pod or {}).get("metadata") or {}
            if pod is None or meta.get("uid") != lease.pod.uid:
                continue  # gone: released and metered by the next pass, as any lease
            if ((pod.get("spec") or {}).get("nodeName")) or meta.get("deletionTimestamp"):
                continue
            if await self.api.delete_lease(lease.namespace, lease.name):
                log.warning(
                    "lease %s swept: Reserved since %s for pod %s, which is bound to no node",
                    lease.key, format_time(lease.start), lease.pod.key,
                )  # fmt: skip
        return plan

    async def audit_charges(
        self, leases: list[LeaseRecord], raw_leases: list[Json], raw_pods: list[Json]
    ) -> None:
        """Report the live leases charged other than what they hold; a failure (the GpuNodes
        cannot be read) is logged and the round goes on."""
        try:
            audit = audit_of(leases, await self.api.gpu_nodes())
            by_key = {
                f"{(o.get('metadata') or {}).get('namespace')}/"
                f"{(o.get('metadata') or {}).get('name')}": o
                for o in raw_leases
            }
            by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in raw_pods}
            await self.charges.report(audit, by_key, by_uid, self.clock())
        except (asyncio.CancelledError, NotLeader):
            raise
        except Exception:
            log.exception("auditing the leases' charges failed; retrying next round")

    async def restore(
        self, leases: list[LeaseRecord], pods: list[PodView], raw: list[Json]
    ) -> RestorePlan:
        """Make again the leases of bound pods that lost theirs; fence those it cannot trust."""
        plan = plan_restores(leases, pods)
        stamp = format_time(self.clock())
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in raw}
        for pod in plan.unadmitted:
            if pod.uid in self._reported:
                continue
            self._reported.add(pod.uid)
            message = (
                f"pod {pod.key} on {pod.node} holds gpupool GPUs without a gpupool.io/admitted "
                f"record: its tenant's quota never admitted it (its gate was removed, or it was "
                f"bound, by something other than gpupool)"
            )
            log.warning("%s", message)
            await self.api.event(by_uid[pod.uid], "NotAdmitted", message, warning=True,
                                 now_rfc3339=stamp)  # fmt: skip
            self.on_integrity("NotAdmitted")
        for item in plan.restore:
            if await self.api.create_lease(lease_to_json(item.lease)):
                log.warning("%s", item.message)
                await self.api.event(by_uid[item.pod.uid], "LeaseRestored", item.message,
                                     warning=True, now_rfc3339=stamp)  # fmt: skip
                self.on_integrity("LeaseRestored")
        if plan.fence:
            # Fence only what a fresh read still shows: the lists may predate a bind's lease.
            again = plan_restores(
                read_leases(await self.api.leases(), log),
                [read_pod(p) for p in await self.api.tenant_pods()],
            )
            still = {f.pod.uid for f in again.fence}
            for fence in plan.fence:
                if fence.pod.uid not in still:
                    continue
                log.error("%s", fence.message)
                await self.api.event(by_uid[fence.pod.uid], "Fenced", fence.message,
                                     warning=True, now_rfc3339=stamp)  # fmt: skip
                await self.api.delete_pod(fence.pod.namespace, fence.pod.name)
                self.on_integrity("Fenced")
        return plan
