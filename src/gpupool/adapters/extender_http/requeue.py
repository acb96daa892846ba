"""Requeue: send back to kube-scheduler's queue the pods filter refused on every node once one of
those nodes takes them.

kube-scheduler parks a pod that filter refused on every node until a cluster event it watches (a
pod, a node) may change that; leases and GpuNodes are not such events. A lease the controller
releases after the pod's last attempt would leave the pod waiting for the queue's periodic flush
(5 minutes by default) while its cards stand free. So filter notes the pods it refused everywhere
(`RefusedPods`), and the leader, every REQUEUE_PERIOD_S, annotates each one that now fits some
node in the cache (`gpupool.io/requeue`): that pod update sends it back to kube-scheduler's
queue, and its next filter reads the cache that found the room.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from gpupool.adapters.extender_http.filter import held_nodes
from gpupool.adapters.extender_http.plans import PlanMemo
from gpupool.adapters.extender_http.refusal import Refusal
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.wire.names import ANN_REQUEUE
from gpupool.placement.filters import Reason

log = logging.getLogger(__name__)

REFUSED_MAX = 256  # pods refused everywhere kept (beyond: the queue's flush)
REQUEUE_PERIOD_S = 1.0


class Annotator(Protocol):
    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> None: ...


class RefusedPods:
    """The pods filter refused on every node, with the nodes kube-scheduler offered each."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[ScheduledPod, tuple[str, ...]]] = {}
        self._seen = -1  # the cache generation `that_fit` last looked at

    def note(self, pod: ScheduledPod, names: tuple[str, ...], *, refused: bool) -> None:
        if not pod.uid:
            return
        self._pods.pop(pod.uid, None)
        if refused:
            self._pods[pod.uid] = (pod, names)
            if len(self._pods) > REFUSED_MAX:
                self._pods.pop(next(iter(self._pods)))

    def that_fit(self, plans: PlanMemo, now: float) -> list[ScheduledPod]:
        """The refused pods one of their nodes now takes (forgotten here: each is nudged once;
        refused again, filter notes it again). Only after the cache changed since the last call."""
        cache = plans.cache
        if cache.generation == self._seen:
            return []
        self._seen = cache.generation
        snap = cache.snapshot()
        out = []
        for uid, (pod, names) in list(self._pods.items()):
            plan = plans.plan(pod)
            if isinstance(plan, Refusal):
                del self._pods[uid]
                continue
            held = held_nodes(cache, pod, now)
            offered = tuple(n for n in names if n not in held) if held else names
            rows = plans.rows(snap, offered)
            rows = rows[rows >= 0]
            if bool((plan.feas.reason[rows] == Reason.FITS).any()):
                del self._pods[uid]
                out.append(pod)
        return out


async def requeue(api: Annotator, pods: list[ScheduledPod], generation: int) -> int:
    """Annotate each pod so kube-scheduler retries it; how many were annotated."""
    done = 0
    for pod in pods:
        try:
            await api.annotate_pod(pod.namespace, pod.name, {ANN_REQUEUE: str(generation)})
        except Exception as err:  # gone since, or the API server unreachable: the queue's
            log.info("could not requeue pod %s: %s", pod.ref, err)  # flush remains
        else:
            done += 1
    return done


async def requeue_loop(
    stop: asyncio.Event,
    leading: Callable[[], bool],
    once: Callable[[], Awaitable[int]],
    period_s: float = REQUEUE_PERIOD_S,
) -> None:
    """`once()` every `period_s` while `leading()`, until `stop` is set."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=period_s)
        if stop.is_set() or not leading():
            continue
        try:
            await once()
        except Exception:
            log.exception("requeue of refused pods failed; retrying")
