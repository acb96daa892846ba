"""/bind: reserve → write → unreserve on failure, as kube-scheduler's Reserve/Bind/Unreserve.

1. `Binder.bind` waits for one of MAX_BINDS slots (refused after BIND_WAIT_S: kube-scheduler
   retries the pod) and holds the pod's lock, so binds of one pod never interleave;
2. the pod: the copy filter decoded (`remember`), else read fresh; its uid must match;
3. `reserve` (reserve.py): the pod's GpuLease on the node;
4. `write_binding`: the Binding, whose annotations (`gpupool.io/allocation`, `gpupool.io/lease`)
   the API server copies onto the pod with its nodeName in one write; a pod already bound there
   (a retried bind whose Binding landed) is only annotated;
5. if the write fails and the pod is not bound there after all (`bound_anyway`), `unreserve`
   deletes the lease: the only undo, in one place.
A gang's member is first checked with its gang (`gang_bind.check_gang`: do all its unplaced
members fit?), and once bound, the room of the others is held (`gang_bind.hold_gang`).
The lease carries `borrowed` and `preemptible` from the pod's `gpupool.io/admitted` record, so
reclaim can find borrowed leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gpupool.adapters.extender_http.bind_context import BindContext
from gpupool.adapters.extender_http.gang_bind import check_gang, hold_gang
from gpupool.adapters.extender_http.locks import KeyedLocks
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.reserve import Reservation, reserve, unreserve
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderBindingArgs, ExtenderBindingResult
from gpupool.adapters.kubernetes.pod import allocation_annotation
from gpupool.adapters.wire.names import ANN_ALLOCATION, ANN_LEASE
from gpupool.domain.allocations import Allocation
from gpupool.state.lease import LeaseRecord

log = logging.getLogger(__name__)

MAX_BINDS = 64  # binds in flight at once (each holds API connections)
BIND_WAIT_S = 2.0  # a bind that cannot start within this is refused, well inside kube-scheduler's
# 5 s httpTimeout: refused, the pod is simply retried; timed out, the bind would run on unseen
POD_MEMO = 4096  # pods kept from filter for their bind


def pod_annotations(lease: LeaseRecord) -> dict[str, str]:
    """What the Binding writes on the pod: its slices and its lease."""
    allocation = Allocation(
        request=lease.pod.name, node=lease.node, cpu_milli=0, memory_mib=0, slices=lease.slices
    )
    return {ANN_ALLOCATION: allocation_annotation(allocation), ANN_LEASE: lease.key}


async def write_binding(
    ctx: BindContext, pod: ScheduledPod, node: str, reservation: Reservation
) -> None:
    annotations = pod_annotations(reservation.lease)
    if pod.node_name:  # a retried bind whose Binding landed: only the annotation is owed
        await ctx.api.annotate_pod(pod.namespace, pod.name, annotations)
    else:  # the Binding's annotations land on the pod with its nodeName, atomically
        await ctx.api.bind_pod(pod.namespace, pod.name, pod.uid, node, annotations)


async def bound_anyway(ctx: BindContext, pod: ScheduledPod, node: str) -> bool:
    """After a failed write: is the pod bound to `node` all the same? Then the lease must stay."""
    try:
        fresh = await ctx.api.get_pod(pod.namespace, pod.name)
    except Exception:
        return False  # unknown: the caller undoes the reservation; the controller's GC and
        # the agent's re-check cover a pod that did land (no pod runs on GPU without a lease)
    return fresh.uid == pod.uid and fresh.node_name == node


async def bind_pod(ctx: BindContext, pod: ScheduledPod, node: str) -> ExtenderBindingResult:
    """Reserve, write; on a failed write, unreserve unless the pod landed anyway."""
    refused = pod.refusal()
    if refused is not None:
        return ExtenderBindingResult.refused(refused.why, refused.message)
    node_object = ctx.cache.nodes.get(node)
    if node_object is None:
        return ExtenderBindingResult.refused(
            Why.UNKNOWN_NODE, f"node {node} is not in the extender's cache"
        )
    excluded = pod.excluded_from(node_object)  # kube-scheduler asked, but /bind trusts no one
    if excluded is not None:
        return ExtenderBindingResult.refused(excluded.why, excluded.message)
    gang = await check_gang(ctx, pod, node)  # a gang's member: do all its members fit?
    if isinstance(gang, Refusal):
        return ExtenderBindingResult.refused(gang.why, gang.message)
    reserved = await reserve(ctx, pod, node)
    if isinstance(reserved, Refusal):
        return ExtenderBindingResult.refused(reserved.why, reserved.message)
    t = time.perf_counter()
    try:
        await write_binding(ctx, pod, node, reserved)
    except Exception as err:
        log.warning("bind %s to %s failed after the reservation: %s", pod.ref, node, err)
        if await bound_anyway(ctx, pod, node):
            if reserved.created and not pod.node_name:  # an earlier Binding won: annotate
                with contextlib.suppress(Exception):
                    annotations = pod_annotations(reserved.lease)
                    await ctx.api.annotate_pod(pod.namespace, pod.name, annotations)
            ctx.cache.mark_bound(reserved.lease.key)
            return ExtenderBindingResult()  # the Binding landed; only its reply was lost
        await unreserve(ctx, reserved)
        return ExtenderBindingResult.refused(
            Why.WRITE_FAILED, f"bind {pod.ref} to {node} failed: {err}"
        )
    ctx.timer.done("binding", t)
    ctx.cache.mark_bound(reserved.lease.key)
    if gang is not None:
        held = await hold_gang(ctx, gang)
        log.info("gang %s: %s bound on %s, room held for %d more", gang.gang, pod.ref, node, held)
    return ExtenderBindingResult()


class Binder:
    """Admits binds (a bounded number at once, one per pod) and hands each to `bind_pod`."""

    def __init__(
        self, ctx: BindContext, *, max_binds: int = MAX_BINDS, bind_wait_s: float = BIND_WAIT_S
    ) -> None:
        self.ctx = ctx
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
                pod = await self._pod(args)
                if isinstance(pod, Refusal):
                    return ExtenderBindingResult.refused(pod.why, pod.message)
                return await bind_pod(self.ctx, pod, args.node)
        finally:
            self._slots.release()

    async def _pod(self, args: ExtenderBindingArgs) -> ScheduledPod | Refusal:
        """Filter's copy of the pod, else a fresh read; refused when the uid is not the one
        kube-scheduler binds."""
        pod = self._pods.pop(args.pod_uid, None)
        if pod is None:
            t = time.perf_counter()
            pod = await self.ctx.api.get_pod(args.pod_namespace, args.pod_name)
            self.ctx.timer.done("get_pod", t)
        if pod.uid != args.pod_uid:
            return Refusal(
                Why.REPLACED,
                f"pod {args.pod_namespace}/{args.pod_name} has uid {pod.uid or None}, "
                f"not {args.pod_uid}: it was replaced",
            )
        return pod
