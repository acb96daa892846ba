"""The claim allocator: gpupool allocates a claim pod's ResourceClaim itself, when the admission
queue admits the pod and before its quota gate lifts (`AdmissionReconciler`'s `claims`).

For a pod the webhook marked as a claim pod (`gpupool.io/claim`), admitting it means, in order:
1. find its claim (a template's claim is made by kube-controller-manager for gated pods too:
   `podNeedsClaims` in `pkg/controller/resourceclaim`; the pod's `status.resourceClaimStatuses`
   names it), read it, and check it still asks what the pod was admitted for;
2. place it with the placement core over the round's snapshot (`plan.plan_claim`): the watch
   cache's leases, and what bound pods hold whose lease is not written yet (the extender writes
   a pod's lease just after its Binding); then read the chosen node's leases from the API server
   (a consistent read) and plan again, once, if another writer (the extender) leased bytes there
   that the snapshot lacked;
3. create the GpuLease (quota, metering, expiry, reclaim and the views read it; the extender's
   cache counts it, so no extended-resource pod is put on the same bytes);
4. write the claim's `status.allocation` (status subresource, uid precondition);
5. write `gpupool.io/allocation` and `gpupool.io/lease` on the pod as the extender's bind does;
and only then does the admission queue remove the gate, so kube-scheduler sees the claim
allocated and honours it. Each step is repeatable: a round that stops half-way finds the lease
(or the allocation) it made and carries on from it.

A pod that cannot be allocated now stays gated: its `gpupool.io/queue` says why, with an Event
when that changes (NoRoom while it waits for room, ClaimRefused when the claim must be fixed).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gpupool.adapters.kubernetes.pod import allocation_annotation
from gpupool.adapters.wire import names
from gpupool.controllers.admission.plan import AdmitPod
from gpupool.controllers.dra.plan import (
    ClaimAllocation,
    allowed_nodes,
    plan_claim,
)
from gpupool.domain.allocations import Allocation
from gpupool.domain.errors import GpupoolError
from gpupool.placement import Planner
from gpupool.placement.default_workload import default_workload
from gpupool.ports import ClaimApi
from gpupool.rfc3339 import format_time
from gpupool.state.admitted import Admitted
from gpupool.state.claim_ask import ClaimAsk
from gpupool.state.claim_writes import ClaimAllocationWrite, ClaimTarget
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import ObjectReference
from gpupool.state.nodes import NodeObject
from gpupool.state.pod_hold import held_by
from gpupool.state.pods import PodView

log = logging.getLogger("gpupool.controller.claims")


class ClaimWaits(GpupoolError):
    """The claim cannot be allocated yet (not made, no room); the message says what it awaits."""


class ClaimAllocator:
    def __init__(self, api: ClaimApi, planner: Planner | None = None) -> None:
        self.api = api
        # the extender's default policy and task shapes: placed as the same extended-resource pod
        self.planner = planner or Planner("gpupool", default_workload())
        self._round: float | None = None
        self._cache = ClusterCache()
        self._nodes: list[NodeObject] = []
        self._publishing: frozenset[str] = frozenset()
        self._leases: dict[str, LeaseRecord] = {}  # pod uid -> its live lease

    async def ready(self, pod: ObjectReference, admit: AdmitPod, now: float) -> bool:
        """Whether the admission queue may lift the pod's gate now: True for a pod without a
        claim on gpupool's class, or once its claim is allocated and leased; False (the pod
        shown why) while it cannot be."""
        view = admit.pod
        if view.claim_ask is None and not view.claim_pod:
            return True
        try:
            if view.claim_ask is None:  # its ask could not be read (the decoder says why)
                raise GpupoolError(view.problem or f"pod {view.key}: gpupool.io/claim unreadable")
            await self._allocate(view, view.claim_ask, admit, now)
        except GpupoolError as err:
            await self._waits(pod, view, err, now)
            return False
        return True

    async def _allocate(self, view: PodView, ask: ClaimAsk, admit: AdmitPod, now: float) -> None:
        name = view.claim_name
        if name is None:
            raise ClaimWaits(
                f"its claim {ask.pod_claim!r} is not made yet (kube-controller-manager makes a "
                f"template's claim for the pod)"
            )
        claim = await self.api.resource_claim(view.namespace, name)
        if claim is None:
            raise ClaimWaits(f"its ResourceClaim {view.namespace}/{name} is not made yet")
        who = f"ResourceClaim {view.namespace}/{name}"
        if claim.refusal is not None:
            raise claim.refusal
        if claim.ask is None or replace(claim.ask, pod_claim=ask.pod_claim) != ask:
            raise GpupoolError(
                f"{who} no longer asks what the pod was admitted for; delete the pod and create "
                f"it again"
            )
        await self._read_round(now)
        target = ClaimTarget(
            view.namespace, name, claim.uid, ask.request, names.DRA_DRIVER, claim.configs
        )
        held = self._leases.get(view.uid)
        if claim.allocated:
            if held is None:
                raise GpupoolError(
                    f"{who} is allocated already, but not by gpupool for this pod (a claim "
                    f"shared with another pod?); gpupool leases a claim to one pod: give each "
                    f"pod its own claim with a resourceClaimTemplate"
                )
        else:
            if held is None:  # else a round stopped before the claim's status: write the same
                held = await self._place_confirmed(view, admit, target)
                if not await self.api.create_lease(held):
                    raise ClaimWaits("its GpuLease exists already; the next round reads it")
                self._cache.set_lease(held)
                self._leases[view.uid] = held
            allocation = ClaimAllocationWrite(target, held.node, held.slices, format_time(now))
            if not await self.api.patch_claim_status(allocation):
                await self.api.delete_lease(held.namespace, held.name)
                self._leases.pop(view.uid, None)
                raise ClaimWaits(f"{who} went away or was made again; the next round retries")
            log.info("allocated %s to %s on %s", who, view.key, held.node)
        await self.api.annotate_pod(view, _marks(held), same_uid=False)

    def _place(self, view: PodView, admit: AdmitPod, target: ClaimTarget) -> ClaimAllocation:
        """The planner's placement over the round's snapshot, charged as the pod was admitted."""
        mark = Admitted(view.submitted_at, admit.borrowed, admit.preemptible,
                        admit.resource, admit.amount)  # fmt: skip
        pod = replace(view, admitted=mark)
        allowed = allowed_nodes(pod, self._nodes, self._publishing)
        try:
            return plan_claim(self.planner, self._cache.snapshot(), pod, target, allowed)
        except GpupoolError as err:
            raise ClaimWaits(str(err)) from None

    async def _place_confirmed(
        self, view: PodView, admit: AdmitPod, target: ClaimTarget
    ) -> LeaseRecord:
        """The placement, checked against the chosen node's leases as the API server holds them
        now: a lease the extender made since the watch cache last heard is folded in and the
        pod planned again (once; then the next round)."""
        for _ in range(2):
            lease = self._place(view, admit, target).lease
            listed = (await self.api.leases_on_node(lease.node)).values
            unseen = [x for x in listed if x.holds_capacity and x.key not in self._cache.leases]
            if not unseen:
                return lease
            log.info("%d lease(s) on %s the snapshot lacked: planning %s again",
                     len(unseen), lease.node, view.key)  # fmt: skip
            for other in unseen:
                self._cache.set_lease(other)
                self._leases[other.pod.uid] = other
        raise ClaimWaits(
            "other leases kept appearing on the nodes it was planned on; the next round retries"
        )

    async def _read_round(self, now: float) -> None:
        """The round's snapshot, read once per admission round (`now` is its stamp); the
        round's own allocations are added to it as they are made."""
        if self._round == now:
            return
        # what cannot be decoded is left out here: the other loops set it aside and say so
        nodes = (await self.api.nodes()).values
        gpunodes = (await self.api.gpu_nodes()).values
        leases = (await self.api.leases()).values
        live = [x for x in leases if x.holds_capacity]
        cache = ClusterCache()
        cache.rebuild(nodes, gpunodes, live)
        # bound pods whose lease is not written yet (it trails the Binding): their bytes are taken
        for pod in (await self.api.tenant_pods()).values:
            hold = held_by(pod)
            if hold is not None:
                cache.hold_unleased(hold)  # a standing lease of its name wins
        self._cache, self._nodes = cache, nodes
        self._leases = {x.pod.uid: x for x in live}
        self._publishing = await self.api.publishing_nodes()
        self._round = now

    async def _waits(
        self, pod: ObjectReference, view: PodView, err: GpupoolError, now: float
    ) -> None:
        refused = not isinstance(err, ClaimWaits)
        note = (
            f"admitted by tenant {view.tenant}'s quota, but its claim "
            f"{'is refused' if refused else 'waits'}: {err}"
        )
        if view.queue_note == note:
            return
        log.info("claim of %s not allocated: %s", view.key, err)
        if await self.api.annotate_pod(view, {names.ANN_QUEUE: note}, same_uid=False):
            await self.api.event(
                pod,
                "ClaimRefused" if refused else "NoRoom",
                note,
                warning=refused,
                now_rfc3339=format_time(now),
            )


def _marks(lease: LeaseRecord) -> dict[str, str]:
    """The pod's annotations as the extender's bind writes them (`bind_write.pod_marks`)."""
    allocation = Allocation(lease.pod.name, lease.node, 0, 0, lease.slices)
    return {names.ANN_ALLOCATION: allocation_annotation(allocation), names.ANN_LEASE: lease.key}
