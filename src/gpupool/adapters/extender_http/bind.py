"""/bind as kube-scheduler's framework runs a binding cycle: named steps over one per-bind state
(`BindState`), each given its inputs, and one place that turns every failure into a typed result
and undoes the reservation.

`Binder.bind` admits a bind: one of MAX_BINDS slots (refused after BIND_WAIT_S: kube-scheduler
retries the pod) and the pod's lock, so binds of one pod never interleave. `run_steps` then takes
the steps in order, each ending the bind with a `Refusal` or handing its result on:

    decode    bind_check.decode        the pod: filter's copy, else a fresh read; its uid
    check     bind_check.check         readable, wants a GPU, admitted; node known, not excluded
    gang      gang_bind.check_gang     a gang member: do all its unplaced members fit?
              gang_bind.give_back      its own held room given back
    reserve   reserve.reserve          the pod's lease on the node, held in memory (Reserve)
    write     bind_write.write_binding the Binding with the pod's annotations (Bind)
    lease     LeaseWriter.submit       the GpuLease, created in the background (PostBind)
    hold_gang gang_bind.hold_gang      the room of the gang's other members (PostBind)

A step that raises (NotLeader, an API server error, a bug) is answered by `bind_failure`
(`refusal_for`: the one conversion). Whatever ended the bind, a reservation without a Binding on
it is undone by `unreserve`, called from `finish` only, once: held only in memory, it is let go
of (when not even a read could tell whether the Binding landed, `OutcomeUnknown`, the node and
the bound pods are read again before the next plan there). A failure after the Binding stood
(holding the gang's room) is logged: the pod is bound, its lease stays. The bind answers once
the Binding stands: the GpuLease is created after it, off the critical path (lease_writer.py
says why what the lease protects still holds).
The lease carries `borrowed` and `preemptible` from the pod's `gpupool.io/admitted` record, so
reclaim can find borrowed leases.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gpupool.adapters.extender_http.bind_check import check, decode
from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.bind_failure import refusal_for
from gpupool.adapters.extender_http.bind_state import BindState, Step
from gpupool.adapters.extender_http.bind_write import OutcomeUnknown, write_binding
from gpupool.adapters.extender_http.gang_bind import check_gang, give_back, hold_gang
from gpupool.adapters.extender_http.gang_hold import GangHolds
from gpupool.adapters.extender_http.locks import KeyedLocks
from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.reserve import reserve, unreserve
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderBindingArgs, ExtenderBindingResult

log = logging.getLogger(__name__)

MAX_BINDS = 64  # binds in flight at once (each holds API connections)
BIND_WAIT_S = 2.0  # a bind that cannot start within this is refused, well inside kube-scheduler's
# 5 s httpTimeout: refused, the pod is simply retried; timed out, the bind would run on unseen
POD_MEMO = 4096  # pods kept from filter for their bind


async def steps(
    ctx: BindContext,
    gangs: GangHolds,
    plans: PlanMemo | None,
    args: ExtenderBindingArgs,
    kept: ScheduledPod | None,
    state: BindState,
) -> Refusal | None:
    """The steps in order, recording in `state` where the bind is and what it holds."""
    node = args.node
    state.step = Step.DECODE
    pod = await decode(ctx.api, args, kept, ctx.timer)
    if isinstance(pod, Refusal):
        return pod
    state.pod, state.step = pod, Step.CHECK
    refused = check(ctx.cache, pod, node)
    if refused is not None:
        return refused
    state.step = Step.GANG
    gang = await check_gang(ctx, gangs, pod, node)
    if isinstance(gang, Refusal):
        return gang
    state.gang = gang
    give_back(ctx, gangs, pod)
    state.step = Step.RESERVE
    reserved = await reserve(ctx, pod, node, plans)
    if isinstance(reserved, Refusal):
        return reserved
    state.reservation, state.step = reserved, Step.WRITE
    await write_binding(ctx.api, pod, node, reserved, ctx.timer)
    state.bound = True
    ctx.cache.mark_bound(reserved.lease.key)
    if reserved.new:  # the pod now records its allocation: its GpuLease can follow
        state.step = Step.LEASE
        ctx.leases.submit(ctx, reserved.lease)
    if gang is not None:
        state.step = Step.HOLD_GANG
        held = await hold_gang(ctx, gangs, gang)
        log.info("gang %s: %s bound on %s, room held for %d more", gang.gang, pod.ref, node, held)
    return None


async def finish(
    ctx: BindContext, state: BindState, ended: Refusal | Exception | None
) -> Refusal | None:
    """The one place a bind ends: a raised error becomes its typed refusal (`refusal_for`), a
    failure before the Binding stood undoes the reservation (`unreserve`, here only, once), a
    failure after it is logged. What the bind answers: None when the pod is bound."""
    sure = not isinstance(ended, OutcomeUnknown)  # else the Binding may have landed
    if isinstance(ended, Exception):
        if state.bound:  # PostBind: the pod is bound, its lease stays
            log.warning("bind %s to %s: after the Binding, %s failed: %s",
                        state.pod_ref, state.node, state.step, ended)  # fmt: skip
            return None
        ended = refusal_for(state.step, ended, state.pod_ref, state.node)
    undo = state.to_undo
    if ended is not None and undo is not None:
        t = time.perf_counter()
        try:
            await unreserve(ctx, undo, sure=sure)
        except Exception as err:  # forgotten here all the same; the controller's GC deletes it
            log.warning("unreserve of %s failed: %s", undo.lease.key, err)
        ctx.timer.done("unreserve", t)
    return ended


async def run_steps(
    ctx: BindContext,
    gangs: GangHolds,
    args: ExtenderBindingArgs,
    kept: ScheduledPod | None = None,
    plans: PlanMemo | None = None,
) -> ExtenderBindingResult:
    """One bind, admitted: its steps, then `finish`; never raises but for cancellation."""
    state = BindState(f"{args.pod_namespace}/{args.pod_name}", args.node)
    ended: Refusal | Exception | None
    try:
        ended = await steps(ctx, gangs, plans, args, kept, state)
    except Exception as err:
        ended = err
    refused = await finish(ctx, state, ended)
    if refused is None:
        return ExtenderBindingResult()
    return ExtenderBindingResult.refused(refused.why, refused.message)


async def bind_pod(
    ctx: BindContext, gangs: GangHolds, pod: ScheduledPod, node: str
) -> ExtenderBindingResult:
    """Bind a pod already decoded (the steps from `check` on)."""
    args = ExtenderBindingArgs(pod.name, pod.namespace, pod.uid, node)
    return await run_steps(ctx, gangs, args, pod)


class Binder:
    """Admits binds (a bounded number at once, one per pod) and runs each (`run_steps`); owns
    the pods filter decoded (for their bind, saving a GET) and the gangs' held room."""

    def __init__(
        self,
        ctx: BindContext,
        *,
        plans: PlanMemo | None = None,
        max_binds: int = MAX_BINDS,
        bind_wait_s: float = BIND_WAIT_S,
    ) -> None:
        self.ctx = ctx
        self.plans = plans
        self.gangs = GangHolds()
        self.max_binds = max_binds
        self.bind_wait_s = bind_wait_s
        self._slots = asyncio.Semaphore(max_binds)
        self._pod_locks = KeyedLocks()
        self._pods: dict[str, ScheduledPod] = {}

    def remember(self, pod: ScheduledPod) -> None:
        """Keep the pod kube-scheduler sent with filter, by uid, for its bind (saves a GET)."""
        if pod.uid:
            self._pods.pop(pod.uid, None)
            self._pods[pod.uid] = pod
            if len(self._pods) > POD_MEMO:
                self._pods.pop(next(iter(self._pods)))

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        t = time.perf_counter()
        try:
            async with asyncio.timeout(self.bind_wait_s):
                await self._slots.acquire()
        except TimeoutError:
            return ExtenderBindingResult.refused(
                Why.BUSY,
                f"gpupool extender busy: {self.max_binds} binds in flight for over "
                f"{self.bind_wait_s:g} s; pod {args.pod_namespace}/{args.pod_name} not bound",
            )
        try:
            self.ctx.timer.done("wait", t)
            async with self._pod_locks.hold(args.pod_uid):
                kept = self._pods.pop(args.pod_uid, None)
                return await run_steps(self.ctx, self.gangs, args, kept, self.plans)
        finally:
            self._slots.release()
