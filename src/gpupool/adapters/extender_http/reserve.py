"""Reserve and Unreserve, as kube-scheduler's framework names them: bind's first step makes the
pod's GpuLease on the node, its undo deletes it again.

Reserve, under the node's lock:
1. list the node's leases from the API server (a consistent read) when the node's ledger is
   stale, and fold them into the cache, so a stale cache can never hide a lease; what the cache
   holds on the node beyond that list (orphans, a lease the controller restored since) counts
   too;
2. a lease the pod already holds there is the reservation (a retried bind);
3. plan the pod on the node against those leases (`lease_plan.plan_lease`) and hold the lease in
   memory (`hold`): later binds on this node plan around it without waiting for the API server;
then, outside the lock, create the GpuLease. A create that fails drops the in-memory hold
(`release`); AlreadyExists means the pod's lease exists elsewhere (`resolve_conflict`) and the
round starts again, at most BIND_ROUNDS times.

Reserve knows nothing of gangs: a gang member's held room is given back by the gang step
(gang_bind.give_back) before the runner calls reserve. `unreserve` is called by the runner only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.held import commit, hold, release
from gpupool.adapters.extender_http.lease_plan import plan_lease
from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.errors import Conflict
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord

log = logging.getLogger(__name__)

BIND_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class Reservation:
    lease: LeaseRecord
    created: bool  # False: the pod's lease already stood (a retried bind)


def fold(ctx: BindContext, node: str, fresh: Sequence[LeaseRecord]) -> None:
    """Make the cache agree with a consistent list of the node's leases."""
    keys = {x.key for x in fresh}
    for stale in [x.key for x in ctx.cache.leases.values() if x.node == node]:
        if stale not in keys and stale not in ctx.cache.orphans:  # orphans are never listed
            ctx.cache.delete_lease(stale)
    for lease in fresh:
        ctx.cache.set_lease(lease)


async def relist(ctx: BindContext, node: str) -> None:
    """The node's ledger starts again from the API server's word (plus creates in flight)."""
    ledger = ctx.ledgers[node]
    inflight = ledger.listing()
    ledger.refresh(await ctx.api.leases_on_node(node), inflight, ctx.monotonic())
    fold(ctx, node, ledger.leases())


async def reserve(
    ctx: BindContext, pod: ScheduledPod, node: str, plans: PlanMemo | None = None
) -> Reservation | Refusal:
    """The pod's lease on `node`: one it already holds, or one created now; or why not. An
    error of the API server propagates, with nothing held (the bind's runner answers it).
    `plans`: filter's plan of the pod, reused while the cache is as filter saw it."""
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
            # what bound pods hold without a lease (a lease deleted under a running pod: no list
            # shows it), and leases another writer made since the list (the controller
            # restoring such a lease from its pod's allocation: it is no orphan any more, and
            # only the watch has told us). Counting a lease the list no longer has is safe: a
            # refusal re-lists and plans again.
            # (orphans are in the cache's leases: `leases_on` has them)
            known = [*ledger.leases(), *(x for x in ctx.cache.leases_on(node)
                                         if x.key not in listed_keys)]  # fmt: skip
            mine = [x for x in known if x.pod.uid == pod.uid and x.holds_capacity]
            if mine:
                return Reservation(mine[0], created=False)
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
            held = hold(ctx.cache, ctx.ledgers, planned)
            ctx.timer.done("plan", t)
        t = time.perf_counter()
        try:
            lease = await ctx.api.create_lease(planned)
        except Conflict:
            release(
                ctx.cache, ctx.ledgers, held, known=True
            )  # ours was not made; the pod's other one is
            problem = await resolve_conflict(ctx, pod, node)
            if problem is not None:
                return problem
            continue  # re-read the node and plan again
        except BaseException:
            release(ctx.cache, ctx.ledgers, held, known=False)
            raise
        commit(ctx.cache, ctx.ledgers, lease)
        ctx.timer.done("create_lease", t)
        return Reservation(lease, created=True)
    return Refusal(Why.RETRIES, f"could not reserve a slice on {node} after retries")


async def unreserve(ctx: BindContext, reservation: Reservation) -> None:
    """Undo `reserve`: delete the reservation's lease, and forget it. Called from one place,
    the bind's runner (bind.py), once, for any failure after the reservation stood."""
    await drop_lease(ctx, reservation.lease)


async def drop_lease(ctx: BindContext, lease: LeaseRecord) -> None:
    """Delete the lease; the cache and the ledger forget it whatever the API server answered
    (an error still propagates)."""
    try:
        await ctx.api.delete_lease(lease.namespace, lease.name)
    finally:
        ctx.cache.delete_lease(lease.key)
        ctx.ledgers[lease.node].discard(lease.key)


async def resolve_conflict(ctx: BindContext, pod: ScheduledPod, node: str) -> Refusal | None:
    """The create found the pod's lease already there: why bind stops, or None to re-plan."""
    existing = await ctx.api.get_lease(pod.namespace, pod.uid)
    if existing is None or existing.node == node or not existing.holds_capacity:
        return None
    if existing.phase is not LeasePhase.RESERVED:
        return Refusal(
            Why.LEASE_ELSEWHERE,
            f"pod {pod.ref} already holds lease {existing.key} on {existing.node}",
        )
    # Reserved elsewhere: a bind killed between the lease and the Binding leaves that, and so
    # does a bind that outlived kube-scheduler's timeout and landed. Only a fresh read of the
    # pod tells them apart; binds of one pod are serialised here and only the leader binds, so
    # an unbound pod has no bind in flight: free it and plan again; kept, it would hold its card
    # and refuse the pod every other node for good.
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
