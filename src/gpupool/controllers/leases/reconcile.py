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
audit never stops the round. One object's failure fails only that object (`controllers.contain`):
a lease or pod that cannot be read, a lease whose plan raises, a write the API server refuses:
that object is set aside with a ReconcileFailed event and retried with backoff, and the round
goes on for the others (the next round plans the same move again from what the API server
holds).

A round decides per lease (`Owed`): one owed some changes looks only at the leases they touch
(`leases.touched`: a changed lease, the leases of a changed pod, of a changed GpuNode, of a
tenant whose GpuQuota changed), the pods of those leases and the changed pods themselves (a
bound pod without a lease: restored), and at the leases and pods whose own time came; each is
read by key from the watch cache, so in a fill a new pod costs its own lease and pod, not a
pass over every lease. A restore or fence found that way is planned again over every lease
(the overlap check needs every live lease on the card). A round owed everything (the first,
the manager's safety net, a retry of an object set aside, one after a failed round) decides
over every lease and pod as before and makes the index of leases again.

After each round `due_at` says when its timed work next comes due, kept per lease and per pod
(`controllers.deadlines`; `leases.due`: a lease's expiry, eviction, reservation timeout or
collection; `leases.restore.lease_awaited`: a bound pod's lease not made by the extender
within the grace; an object set aside retried); the manager runs the loop then, or sooner on a
change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.lease import phase_name
from gpupool.controllers.contain import Containment, lease_ref, pod_ref
from gpupool.controllers.deadlines import Deadlines
from gpupool.controllers.due import soonest
from gpupool.controllers.leases.charge_audit import CardSizes
from gpupool.controllers.leases.charge_reconcile import ChargeReporter, audit_of
from gpupool.controllers.leases.due import lease_due
from gpupool.controllers.leases.expiry import plan_expiry
from gpupool.controllers.leases.expiry_reconcile import apply_expiry
from gpupool.controllers.leases.plan import (
    RESERVED_TIMEOUT_S,
    LeasePlan,
    Move,
    plan_leases,
)
from gpupool.controllers.leases.restore import (
    Fence,
    Restore,
    RestorePlan,
    lease_awaited,
    plan_restores,
)
from gpupool.controllers.leases.touched import LeaseIndex
from gpupool.controllers.reads import READ, decode_leases, decode_pods, quota_specs
from gpupool.controllers.work_queue import EVERYTHING, Owed
from gpupool.ports import Clock, ClusterApi, Outcomes
from gpupool.quota.spec import Budget
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.lease_terms import TenantLeaseTerms
from gpupool.state.lease_writes import LeaseStatusWrite
from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.nodes import GpuNodeObject
from gpupool.state.pods import PodView
from gpupool.state.quota_object import QuotaObject

log = logging.getLogger("gpupool.controller.leases")

LOOP = "leases"
LEASE, POD = "lease", "pod"  # what a deadline is kept for (a lease's timed work, a pod's restore)
NOTHING = LeasePlan((), (), ())


def lease_move(move: Move, now: float) -> LeaseStatusWrite:
    """What a planned move writes on the lease (its condition is named after the phase)."""
    to = move.to
    return LeaseStatusWrite(move.phase, move.reason, move.message, now, bound_at=to.bound_at,
                            active_at=to.active_at, ended_at=to.ended_at,
                            gib_hours=move.gib_hours)  # fmt: skip


def _budgets(contain: Containment, quotas: Listed[QuotaObject], now: float) -> dict[str, Budget]:
    """The tenants' budgets, so ended leases are kept while their window counts them (an
    unreadable or invalid quota keeps none and is set aside)."""
    read = contain.decode(READ, "GpuQuota", quota_specs(quotas), now)
    return {q.name: q.budget for q, _ in read if q.budget is not None}


def _terms(quotas: Listed[QuotaObject]) -> dict[str, TenantLeaseTerms]:
    """The tenants' lease terms (an invalid quota's too: its TTL still holds); one that did not
    decode gives none, and `_budgets` has set it aside with its event."""
    return {q.name: q.terms for q in quotas.values}


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
        contain: Containment | None = None,
    ) -> None:
        self.api = api
        self.contain = contain if contain is not None else Containment(LOOP, api)
        # each integrity event written, by its reason (the controller's metrics count them)
        self.on_integrity = on_integrity
        self.outcomes = outcomes
        self.clock = clock
        self._sizes = CardSizes()  # the cards' sizes, made again only when a GpuNode changed
        self.retention_s = retention_s
        self.reserved_timeout_s = reserved_timeout_s
        self._reported: set[str] = set()  # uids reported unadmitted (one event per pod)
        self.charges = ChargeReporter(api, on_report=on_integrity)
        self._lease_refs: dict[str, ObjectReference] = {}  # this round's GpuLeases by key
        self._index = LeaseIndex()  # every lease, by its pod, node and tenant
        self._indexed = False  # the index was made by a round over everything
        # (LEASE, lease key) and (POD, pod key) -> when its timed work comes due (wall time)
        self._due: Deadlines[tuple[str, str]] = Deadlines()
        self._round_at = 0.0  # when the last round began (wall time)

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
        refs: Mapping[str, ObjectReference],
        quotas: Listed[QuotaObject],
        now: float,
        every: bool,
    ) -> None:
        """Expiry terms, renewals, expiry notices and evictions (`leases.expiry`), over the
        round's snapshot."""
        live = [le for le in leases if not le.phase.terminal]
        if not live:
            return
        tenants = _terms(quotas)
        by_uid = {p.uid: p for p in pods}
        plan = self.contain.plan(
            "expiry", "GpuLease", live, lambda le: le.key,
            lambda some: plan_expiry(list(some), by_uid, tenants, now), now, self._lease_obj,
            every=every,
        )  # fmt: skip
        await apply_expiry(self.api, plan, refs, now, self.outcomes, self.contain)

    def _lease_obj(self, lease: LeaseRecord) -> ObjectReference:
        """The lease's reference as this round read it (an Event names it)."""
        return self._lease_refs.get(lease.key) or lease_ref(lease.name, lease.namespace)

    def _planned(
        self, leases: list[LeaseRecord], by_uid: dict[str, PodView], now: float,
        gone: frozenset[str], budgets: Mapping[str, Budget], every: bool,
    ) -> LeasePlan:  # fmt: skip
        return self.contain.plan(
            "lifecycle", "GpuLease", leases, lambda le: le.key,
            lambda some: self._plan(list(some), by_uid, now, gone, budgets), now,
            self._lease_obj, every=every,
        )  # fmt: skip

    async def reconcile(self, owed: Owed = EVERYTHING) -> LeasePlan:
        now = self._round_at = self.clock()
        retry = self.contain.next_retry(float("-inf"))
        # a retry of an object set aside, or no index yet: a round over everything, as before
        whole = owed.everything or not self._indexed or (retry is not None and retry <= now)
        try:
            if whole:
                return await self._reconcile(now)
            return await self._reconcile_owed(owed, now)
        finally:
            await self.contain.report(now)

    def due_at(self) -> float | None:
        """When the loop next has timed work, as its rounds saw it (wall time)."""
        return soonest(self._due.first(), self.contain.next_retry(self._round_at))

    async def _reconcile(self, now: float) -> LeasePlan:
        """A round over every lease and pod; the index and the deadlines are made again."""
        listed_leases = await self.api.leases()
        self._lease_refs = {ref.key: ref for _, ref in listed_leases.read}
        leases = decode_leases(self.contain, listed_leases, now)
        self._index.rebuild(leases)
        self._indexed = True
        self._due = Deadlines()
        read = decode_pods(self.contain, await self.api.tenant_pods(), now)
        return await self._decide(leases, read, now, every=True)

    async def _reconcile_owed(self, owed: Owed, now: float) -> LeasePlan:
        """A round over what `owed`'s changes touch and what came due (see the module)."""
        changed: dict[str, set[str]] = {}
        for kind, key in owed.changed:
            changed.setdefault(kind, set()).add(key)
        lease_keys, pod_keys = changed.get("gpuleases", set()), changed.get("pods", set())
        for what, key in self._due.pop_due(now):
            (lease_keys if what == LEASE else pod_keys).add(key)
        asked = self._index.touched(
            leases=lease_keys,
            pods=pod_keys,
            nodes=changed.get("gpunodes", ()),
            tenants=changed.get("gpuquotas", ()),
        )
        if not asked and not pod_keys:
            return NOTHING
        listed: Listed[LeaseRecord] = Listed()
        if asked:
            listed = await self.api.leases(keys=sorted(asked))
        self._lease_refs = {ref.key: ref for _, ref in listed.read}
        leases = decode_leases(self.contain, listed, now, every=False)
        # a deleted lease's pod is looked at too: still bound, it has its lease made again
        pod_keys |= self._index.seen(asked, leases, [bad.ref.key for bad in listed.unreadable])
        for key in asked - self._lease_refs.keys():
            self._due.drop((LEASE, key))  # gone (or unreadable: set aside, retried whole)
        pod_keys |= {lease.pod.key for lease in leases}
        listed_pods = await self.api.tenant_pods(keys=sorted(pod_keys))
        read = decode_pods(self.contain, listed_pods, now, every=False)
        return await self._decide(leases, read, now, every=False)

    async def _decide(
        self,
        leases: list[LeaseRecord],
        read: list[tuple[PodView, ObjectReference]],
        now: float,
        *,
        every: bool,
    ) -> LeasePlan:
        """The round's decisions over `leases` and the pods `read` (`every`: all there are)."""
        pods = [v for v, _ in read]
        refs = {v.key: ref for v, ref in read}
        quotas = await self.api.quotas()
        budgets = _budgets(self.contain, quotas, now)
        gpunodes = await self._gpu_nodes()
        await self.restore(leases, pods, refs, self._sizes(gpunodes or ()), every=every)
        judged = None if every else [lease.key for lease in leases]
        await self.audit_charges(leases, refs, gpunodes, judged)
        by_uid = {p.uid: p for p in pods}
        plan = self._planned(leases, by_uid, now, frozenset(), budgets, every)
        if plan.unsure:  # pods outside the tenant list: look each up before declaring it gone
            gone: set[str] = set()
            for lease in plan.unsure:
                pod = await self.api.pod(lease.pod.namespace, lease.pod.name)
                if pod is None or _uid(pod) != lease.pod.uid:
                    gone.add(lease.pod.uid)
                else:
                    for view, _ in decode_pods(self.contain, _one(pod), now, every=False):
                        by_uid[lease.pod.uid] = view
            plan = self._planned(leases, by_uid, now, frozenset(gone), budgets, every)
        for move in plan.moves:
            await self._lease_step("lifecycle", move.lease, partial(self._move, move, now), now)
        await self._expire(leases, pods, refs, quotas, now, every)
        for item in plan.collect:
            await self._lease_step("collect", item.lease, partial(self._collect, item.lease), now)
        for lease in plan.sweep:
            await self._lease_step("sweep", lease, partial(self._sweep, lease), now)
        self._schedule(leases, pods, by_uid, budgets, now)
        return plan

    def _schedule(
        self,
        leases: list[LeaseRecord],
        pods: list[PodView],
        by_uid: Mapping[str, PodView],
        budgets: Mapping[str, Budget],
        now: float,
    ) -> None:
        """Each lease's and each pod's next timed work, as this round saw them."""
        for lease in leases:
            at = lease_due(lease, by_uid.get(lease.pod.uid), now, retention_s=self.retention_s,
                           reserved_timeout_s=self.reserved_timeout_s, budgets=budgets)  # fmt: skip
            self._due.schedule((LEASE, lease.key), at)
        leased = {lease.pod.uid for lease in leases}
        for pod in pods:
            self._due.schedule((POD, pod.key), lease_awaited(pod, pod.uid in leased, now))

    async def _lease_step(
        self, step: str, lease: LeaseRecord, work: Callable[[], Awaitable[None]], now: float
    ) -> None:
        await self.contain.handle(step, self._lease_obj(lease), work, now)

    async def _move(self, move: Move, now: float) -> None:
        lease = move.lease
        if await self.api.move_lease(lease.namespace, lease.name, lease_move(move, now)):
            log.info("lease %s: %s (%s)", lease.key, phase_name(move.phase), move.message)

    async def _collect(self, lease: LeaseRecord) -> None:
        if await self.api.delete_lease(lease.namespace, lease.name):
            log.info("lease %s collected", lease.key)

    async def _sweep(self, lease: LeaseRecord) -> None:
        # The snapshot may predate the pod's Binding: read it again; bound, it keeps the
        # lease (the next pass moves it to Bound).
        pod = await self.api.pod(lease.pod.namespace, lease.pod.name)
        if pod is None or _uid(pod) != lease.pod.uid:
            return  # gone: released and metered by the next pass, as any lease
        if isinstance(pod, Unreadable):
            raise pod.error  # this lease is set aside: its pod cannot be read now
        if pod.node or pod.deleting:
            return
        if await self.api.delete_lease(lease.namespace, lease.name):
            log.warning(
                "lease %s swept: Reserved since %s for pod %s, which is bound to no node",
                lease.key, format_time(lease.start), lease.pod.key,
            )  # fmt: skip

    async def _gpu_nodes(self) -> list[GpuNodeObject] | None:
        """The GpuNodes that read (the cards' sizes; an unreadable one reports no cards), or
        None when they cannot be read this round (the audit waits for the next; a restored
        lease is charged its admitted amount)."""
        try:
            listed = await self.api.gpu_nodes()
        except (asyncio.CancelledError, NotLeader):
            raise
        except Exception:
            log.exception("reading the GpuNodes failed; the charge audit waits for the next round")
            return None
        for bad in listed.unreadable:
            log.warning("charge audit: ignoring an unreadable GpuNode %s: %s", bad.ref.key,
                        bad.error)  # fmt: skip
        return listed.values

    async def audit_charges(
        self,
        leases: list[LeaseRecord],
        pods: Mapping[str, ObjectReference],
        gpunodes: list[GpuNodeObject] | None,
        judged: list[str] | None = None,
    ) -> None:
        """Report the live leases charged other than what they hold; a failure is logged and
        the round goes on. `pods`: the pods' references by key; `judged`: the keys of
        `leases` when they are not every lease."""
        if gpunodes is None:
            return
        try:
            audit = audit_of(leases, gpunodes, self._sizes)
            by_uid = {ref.uid: ref for ref in pods.values() if ref.uid}
            await self.charges.report(audit, self._lease_refs, by_uid, self.clock(), judged)
        except (asyncio.CancelledError, NotLeader):
            raise
        except Exception:
            log.exception("auditing the leases' charges failed; retrying next round")

    async def restore(
        self,
        leases: list[LeaseRecord],
        pods: list[PodView],
        refs: Mapping[str, ObjectReference],
        card_bytes: Mapping[str, int] | None = None,
        *,
        every: bool = True,
    ) -> RestorePlan:
        """Make again the leases of bound pods that lost theirs; fence those it cannot trust.
        A pod whose handling fails is set aside; the others go on. `refs`: the pods'
        references by key, as listed. `every`: `leases` and `pods` are all there are; else
        `leases` holds every lease of `pods`, and a restore or fence found is planned again
        over every lease (a restored lease must overlap no live lease on its cards)."""
        now = self.clock()

        def pod_obj(pod: PodView) -> ObjectReference:
            return refs.get(pod.key) or pod_ref(pod)

        def planned(over: Sequence[LeaseRecord]) -> RestorePlan:
            return self.contain.plan(
                "restore", "Pod", pods, lambda p: p.key,
                lambda some: plan_restores(over, some, card_bytes, now), now, pod_obj,
                every=every,
            )  # fmt: skip

        plan = planned(leases)
        if not every and (plan.restore or plan.fence):  # rare: a pod bound without its lease
            plan = planned(decode_leases(self.contain, await self.api.leases(), now, every=False))
        stamp = format_time(now)
        for pod in plan.unadmitted:
            if pod.uid in self._reported:
                continue
            self._reported.add(pod.uid)
            work = partial(self._unadmitted, pod, pod_obj(pod), stamp)
            await self.contain.handle("restore", pod_obj(pod), work, now)
        for item in plan.restore:
            work = partial(self._restore, item, pod_obj(item.pod), stamp)
            await self.contain.handle("restore", pod_obj(item.pod), work, now)
        if plan.fence:
            # Fence only what a fresh read (not the watch cache) still shows: the lists may
            # predate a bind's lease. Rare: only when a fence is planned.
            fresh_leases = await self.api.leases(fresh=True)
            fresh_pods = await self.api.tenant_pods(fresh=True)
            again = plan_restores(
                decode_leases(self.contain, fresh_leases, now),
                [v for v, _ in decode_pods(self.contain, fresh_pods, now)],
            )
            still = {f.pod.uid for f in again.fence}
            for fence in plan.fence:
                if fence.pod.uid not in still:
                    continue
                work = partial(self._fence, fence, pod_obj(fence.pod), stamp)
                await self.contain.handle("restore", pod_obj(fence.pod), work, now)
        return plan

    async def _unadmitted(self, pod: PodView, ref: ObjectReference, stamp: str) -> None:
        message = (
            f"pod {pod.key} on {pod.node} holds gpupool GPUs without a gpupool.io/admitted "
            f"record: its tenant's quota never admitted it (its gate was removed, or it was "
            f"bound, by something other than gpupool)"
        )
        log.warning("%s", message)
        await self.api.event(ref, "NotAdmitted", message, warning=True, now_rfc3339=stamp)
        self.on_integrity("NotAdmitted")

    async def _restore(self, item: Restore, ref: ObjectReference, stamp: str) -> None:
        if await self.api.create_lease(item.lease):
            log.warning("%s", item.message)
            await self.api.event(ref, "LeaseRestored", item.message, warning=True,
                                 now_rfc3339=stamp)  # fmt: skip
            self.on_integrity("LeaseRestored")

    async def _fence(self, fence: Fence, ref: ObjectReference, stamp: str) -> None:
        log.error("%s", fence.message)
        await self.api.event(ref, "Fenced", fence.message, warning=True, now_rfc3339=stamp)
        await self.api.delete_pod(fence.pod.namespace, fence.pod.name)
        self.on_integrity("Fenced")


def _uid(pod: PodView | Unreadable) -> str | None:
    return pod.uid if isinstance(pod, PodView) else pod.ref.uid


def _one(pod: PodView | Unreadable) -> Listed[PodView]:
    """A pod read alone, as a listing (the loop's containment takes it)."""
    if isinstance(pod, Unreadable):
        return Listed(unreadable=(pod,))
    return Listed(((pod, pod_ref(pod)),))
