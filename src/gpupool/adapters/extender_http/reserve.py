"""Reserve and Unreserve, as kube-scheduler's framework names them: bind's reserve step holds the
pod's lease on the node in memory; its undo lets go of it again. The GpuLease itself is created
after the Binding, off the bind's critical path (lease_writer.py, which says why that is safe).

Reserve, under the node's lock:
1. list the node's leases from the API server (a consistent read) when the node's ledger is
   stale, and fold them into the cache, so a stale cache can never hide a lease; the first list
   after start, an election or an unsure write also reads the bound pods, and holds the
   allocations that have no lease yet (`ledger.pods_due`); what the cache holds on the node
   beyond that list (orphans, a lease the controller restored since) counts too;
2. a lease the pod already holds there is the reservation (a retried bind);
3. plan the pod on the node against those leases (`lease_plan.plan_lease`) and hold the lease in
   memory (`hold`): later binds on this node plan around it without waiting for the API server.
Another lease of the pod's name that the cache knows (on another node, or ended) is settled
first, outside the lock (`resolve_conflict`), and the round starts again, at most BIND_ROUNDS
times.

Reserve knows nothing of gangs: a gang member's held room is given back by the gang step
(gang_bind.give_back) before the runner calls reserve. `unreserve` is called by the runner only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.held import Held, hold, release
from gpupool.adapters.extender_http.lease_plan import plan_lease
from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord

log = logging.getLogger(__name__)

BIND_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class Reservation:
    lease: LeaseRecord
    held: Held | None  # held in memory, to be created after the Binding; None: it stood already

    @property
    def new(self) -> bool:
        """This bind planned the lease (else the pod's lease already stood: a retried bind)."""
        return self.held is not None


def fold(ctx: BindContext, node: str, fresh: Sequence[LeaseRecord]) -> None:
    """Make the cache agree with a consistent list of the node's leases."""
    keys = {x.key for x in fresh}
    for stale in [x.key for x in ctx.cache.leases.values() if x.node == node]:
        if stale not in keys and stale not in ctx.cache.orphans:  # orphans are never listed
            ctx.cache.delete_lease(stale)
    for lease in fresh:
        ctx.cache.set_lease(lease)


async def relist(ctx: BindContext, node: str) -> None:
    """The node's ledger starts again from the API server's word (plus creates in flight); when
    due, the bound pods are read too (all nodes' at once), and what they hold without a lease is
    held."""
    ledger = ctx.ledgers[node]
    inflight = ledger.listing()
    pods_due = ctx.ledgers.pods_due()
    ledger.refresh(await ctx.api.leases_on_node(node), inflight, ctx.monotonic())
    if pods_due:  # read after the leases: a lease made since is in the cache (the watch)
        for held in await ctx.api.held_by_bound_pods():
            ctx.cache.hold_unleased(held)  # a standing lease of its name wins
        ctx.ledgers.pods_read()
    fold(ctx, node, ledger.leases())


async def reserve(
    ctx: BindContext, pod: ScheduledPod, node: str, plans: PlanMemo | None = None
) -> Reservation | Refusal:
    """The pod's lease on `node`: one it already holds, or one planned and held now; or why
    not. An error of the API server propagates, with nothing held (the bind's runner answers
    it). `plans`: filter's plan of the pod, reused while the cache is as filter saw it."""
    ledger = ctx.ledgers[node]
    for round_ in range(BIND_ROUNDS):
        async with ctx.node_locks.hold(node):
            t = time.perf_counter()
            listed = bool(round_) or ledger.stale(ctx.ledger_max_age_s, ctx.monotonic())
            if listed:
                await relist(ctx, node)
                t = ctx.timer.done("list_leases", t)
            listed_keys = {x.key for x in ledger.leases()}
            # What the ledger's list lacks but the cache knows, and no slice may be laid over:
            # what bound pods hold without a lease (a lease deleted under a running pod, or not
            # made yet: no list shows it), and leases another writer made since the list (the
            # controller restoring such a lease from its pod's allocation: it is no orphan any
            # more, and only the watch has told us). Counting a lease the list no longer has is
            # safe: a refusal re-lists and plans again.
            # (orphans are in the cache's leases: `leases_on` has them)
            known = [*ledger.leases(), *(x for x in ctx.cache.leases_on(node)
                                         if x.key not in listed_keys)]  # fmt: skip
            # /filter's pick of this pod stops counting here, with no await before the lease
            # is held below: the pod counts all along (a pick forgotten before the list above
            # left its card free to the filters of other pods meanwhile)
            ctx.cache.forget_pick(pod.lease_key)
            mine = [x for x in known if x.pod.uid == pod.uid and x.holds_capacity]
            if mine:
                return Reservation(mine[0], held=None)
            if pod.node_name:
                return Refusal(
                    Why.ALREADY_BOUND, f"pod {pod.ref} is already bound to {pod.node_name}"
                )
            kept = None if plans is None else plans.current(pod)  # filter's, if still valid
            feas = None if kept is None else kept.feas
            planned = plan_lease(ctx.cache, ctx.planners.of(pod.policy), pod, node, known,
                                 ctx.compute_modes(), feas)  # fmt: skip
            if isinstance(planned, Refusal):
                if not listed:
                    continue  # maybe only a release the ledger has not seen: re-list, re-plan
                return planned
            if planned.key not in ctx.cache.leases:
                held = hold(ctx.cache, ctx.ledgers, planned)
                ctx.timer.done("plan", t)
                return Reservation(planned, held=held)
        # The cache knows another lease of the pod's name (elsewhere, or ended and not yet
        # collected): its create would fail. Settle it first; an ended one refuses the bind.
        problem = await resolve_conflict(ctx, pod, node)
        if problem is not None:
            return problem
    return Refusal(Why.RETRIES, f"could not reserve a slice on {node} after retries")


async def unreserve(ctx: BindContext, reservation: Reservation, *, sure: bool = True) -> None:
    """Undo `reserve`: a lease held in memory is let go of (nothing was created: the GpuLease
    comes only after the Binding); one that stood already is deleted. Called from one place,
    the bind's runner (bind.py), once, for any failure before the Binding stood. `sure`: False
    when the Binding may have landed all the same (its outcome unknown): the node is then
    re-listed, its bound pods read, before its ledger is trusted again."""
    if reservation.held is None:
        await drop_lease(ctx, reservation.lease)
        return
    release(ctx.cache, ctx.ledgers, reservation.held, known=True)
    if not sure:
        ctx.ledgers.unsure(reservation.lease.node)


async def drop_lease(ctx: BindContext, lease: LeaseRecord) -> None:
    """Delete the lease; the cache and the ledger forget it whatever the API server answered
    (an error still propagates)."""
    try:
        await ctx.api.delete_lease(lease.namespace, lease.name)
    finally:
        ctx.cache.delete_lease(lease.key)
        ctx.ledgers[lease.node].discard(lease.key)


async def resolve_conflict(ctx: BindContext, pod: ScheduledPod, node: str) -> Refusal | None:
    """The cache knows another lease of the pod's name: why bind stops, or None to re-plan."""
    existing = await ctx.api.get_lease(pod.namespace, pod.uid)
    if existing is None or existing.node == node or not existing.holds_capacity:
        stale = ctx.cache.leases.get(f"{pod.namespace}/{pod.uid}")
        if existing is None and stale is not None and stale.key not in ctx.cache.orphans:
            ctx.cache.delete_lease(stale.key)  # the API server has no such lease: forget it
        return None
    if existing.phase is not LeasePhase.RESERVED:
        return Refusal(
            Why.LEASE_ELSEWHERE,
            f"pod {pod.ref} already holds lease {existing.key} on {existing.node}",
        )
    # Reserved elsewhere for a pod that may be unbound: a lease made before its Binding (by an
    # extender of before the lease came after the Binding, killed in between), or a bind that
    # outlived kube-scheduler's timeout and landed. Only a fresh read of the pod tells them
    # apart; binds of one pod are serialised here and only the leader binds, so an unbound pod
    # has no bind in flight: free it and plan again; kept, it would hold its card and refuse the
    # pod every other node for good.
    fresh = await ctx.api.get_pod(pod.namespace, pod.name)
    if fresh.uid != pod.uid:
        return Refusal(Why.REPLACED, f"pod {pod.ref} was replaced")
    if fresh.node_name:
        return Refusal(Why.ALREADY_BOUND, f"pod {pod.ref} is already bound to {fresh.node_name}")
    log.warning(
        "pod %s: releasing the stale reservation %s on %s to bind on %s",
        pod.ref, existing.key, existing.node, node,
    )  # fmt: skip
    await drop_lease(ctx, existing)  # an earlier, dead bind's reservation: not this bind's undo
    return None
