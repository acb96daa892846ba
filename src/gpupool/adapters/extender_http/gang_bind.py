"""A gang is placed only when all of it fits, and the room for the rest is held while it comes.

When kube-scheduler binds the first member of a gang (`gpupool.io/gang`) that has no hold yet,
bind asks first (`check_gang`): with this member on its node, do the gang's other unplaced
members fit too? The what-if runs on the cache's snapshot with the planner each member would be
placed with (`placement.whatif.place_together`: each assumed before the next, all forgotten
after). If not, the bind is refused with the member that fits nowhere; if the gang would not
fit even on the cluster's empty cards, the refusal says it never will. kube-scheduler retries a
refused bind, so the gang is placed once room appears.

If it fits, the member is bound and the room of the others is *held* (`hold_gang`): a lease
planned for each (`lease_plan.plan_lease`, on the node the what-if chose) is counted in the
node's ledger and the cache like a create in flight (`held.hold`), so filter, prioritize and
bind of every other pod see that room as taken. Each member then:
- in filter, is offered only its held node (its own held room would otherwise count against it);
- in bind, gives its held room back first (`give_back`, the gang step, before reserve) and
  reserves as any pod does: reserve knows nothing of gangs.
Two members bound at once share one hold; a member already reserving or bound is never held.
A hold lasts `GANG_HOLD_S` at most (the members are admitted in one round, so they normally all
arrive within seconds); `sweep` releases what is left then, with a `GangHoldExpired` event on the
member, and puts held leases back into the cache after a resync rebuilt it without them.

Holds live in the leader extender's memory only: a restarted or new leader has none, and the
next member's bind checks the gang again (its placed members hold real leases by then).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.gang_hold import GANG_HOLD_S, GangHolds
from gpupool.adapters.extender_http.held import hold, release
from gpupool.adapters.extender_http.lease_plan import plan_lease
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.domain.units import format_bytes
from gpupool.placement.filters import Reason, feasibility
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.placement.whatif import place_together

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GangPlan:
    """The members to hold room for once the binding member is bound, and where."""

    gang: str
    rest: tuple[ScheduledPod, ...]
    nodes: tuple[str, ...]


def _describe(pod: ScheduledPod) -> str:
    req = pod.request
    size = "whole cards" if req.gpu_memory_bytes is None else format_bytes(req.gpu_memory_bytes)
    return f"{pod.name} ({req.gpu_count} GPU(s), {size})"


def _empty(ctx: BindContext) -> ClusterSnapshot:
    snap = ctx.cache.snapshot()
    return ClusterSnapshot(list(snap.nodes))


async def check_gang(
    ctx: BindContext, gangs: GangHolds, pod: ScheduledPod, node: str
) -> GangPlan | Refusal | None:
    """Before a gang member binds on `node`: None when nothing is to be held (not in a gang, its
    room was held, or no other member waits); the plan of the others' room; or why not now."""
    if pod.gang is None:
        return None
    if gangs.standing(pod.gang.key) is not None:
        return None  # the gang's room is held already: this member takes its own (reserve)
    try:
        members = await ctx.api.gang_pods(pod.namespace, pod.gang.name)
    except Exception as err:
        return Refusal(
            Why.GANG_NO_ROOM,
            f"gang {pod.gang.key}: its members could not be listed to check that all fit "
            f"({err}); kube-scheduler retries",
        )
    rest = tuple(
        m
        for m in sorted(members, key=lambda m: m.name)
        if m.uid != pod.uid
        and not m.node_name
        and m.request.wants_gpu
        and m.problem is None
        and not ctx.cache.placed(f"{m.namespace}/{m.uid}")
    )
    if not rest:
        return None
    snap = ctx.cache.snapshot()
    i = snap.index.get(node)
    if i is None:
        return None  # reserve refuses an unknown node with its own reason
    planner = ctx.planners.of(pod.policy)
    feas = feasibility(snap, pod.request)
    if int(feas.reason[i]) != Reason.FITS:
        return None  # reserve refuses it with the node's reason
    decision = planner.decide(snap, pod.request, feas, i, 0.0)
    snap.assume(decision)
    try:
        placed = place_together(planner, snap, [m.request for m in rest])
    finally:
        snap.forget(decision)
    n = len(rest) + 1
    if isinstance(placed, int):
        never = place_together(planner, _empty(ctx), [pod.request, *(m.request for m in rest)])
        if isinstance(never, int):
            who = ([pod, *rest])[never]
            return Refusal(
                Why.GANG_NEVER_FITS,
                f"gang {pod.gang.key} can never be placed: its {n} unplaced members do not fit "
                f"this cluster's cards even with nothing else on them (member {_describe(who)} "
                f"fits nowhere after the others); make the gang or its members smaller",
            )
        return Refusal(
            Why.GANG_NO_ROOM,
            f"gang {pod.gang.key}: its {n} unplaced members do not all fit now: with "
            f"{pod.name} on {node}, member {_describe(rest[placed])} fits on no node; the "
            f"gang is placed once room for all of it appears",
        )
    return GangPlan(pod.gang.key, rest, tuple(d.node for d in placed))


def give_back(ctx: BindContext, gangs: GangHolds, pod: ScheduledPod) -> bool:
    """The room held for this member, given back before it reserves (the held lease bears the
    pod's uid, but no GpuLease stands behind it); whether there was one."""
    own = gangs.take(pod)
    if own is not None:
        release(ctx.cache, ctx.ledgers, own, known=True)
    return own is not None


async def hold_gang(ctx: BindContext, gangs: GangHolds, plan: GangPlan) -> int:
    """Hold each member's room on the node the what-if chose; how many were held. A member
    whose room is gone by now (another bind took it in between) is not held: it is placed as
    room allows, as it would be without a hold."""
    gang = gangs.standing(plan.gang) or gangs.add(
        plan.gang, ctx.monotonic() + GANG_HOLD_S
    )  # two members bound at once: one hold, each member's room once
    for member, node in zip(plan.rest, plan.nodes, strict=True):
        async with ctx.node_locks.hold(node):
            if member.uid in gang.members or ctx.cache.placed(f"{member.namespace}/{member.uid}"):
                continue  # held already, or reserving (or bound) since the what-if
            ledger = ctx.ledgers[node]
            listed = {x.key for x in ledger.leases()}
            known = [*ledger.leases(), *(o for o in ctx.cache.orphans_on(node)
                                         if o.key not in listed)]  # fmt: skip
            planned = plan_lease(ctx.cache, ctx.planners.of(member.policy), member, node, known)
            if isinstance(planned, Refusal):
                log.info("gang %s: no room held for %s: %s", plan.gang, member.ref, planned)
                continue
            gang.members[member.uid] = (member, hold(ctx.cache, ctx.ledgers, planned))
    held = len(gang.members)
    gangs.discard_empty(plan.gang)
    return held


async def sweep(ctx: BindContext, gangs: GangHolds) -> int:
    """Release the rooms held past their time, each with an event on its member; put held
    leases a cache rebuild dropped back. How many were released."""
    expired = gangs.expired(ctx.monotonic())
    for gang, pod, held in expired:
        release(ctx.cache, ctx.ledgers, held, known=True)
        message = (
            f"the room held for this pod on node {held.lease.node} (gang {gang}) was released "
            f"after {GANG_HOLD_S:g}s: the pod did not come to bind in time; it is placed as "
            f"room allows"
        )
        try:
            await ctx.api.pod_event(pod, "GangHoldExpired", message)
        except Exception as err:  # an event is best effort
            log.info("could not record GangHoldExpired on %s: %s", pod.ref, err)
    for held in gangs.all_held():
        if held.lease.key not in ctx.cache.leases:
            ctx.cache.set_lease(held.lease)
    return len(expired)
