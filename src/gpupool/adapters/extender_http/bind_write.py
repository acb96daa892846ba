"""Bind's write step, as kube-scheduler's Bind: the Binding, whose annotations
(`gpupool.io/allocation`, `gpupool.io/lease`) the API server copies onto the pod with its
nodeName in one write; a pod already bound there (a retried bind whose Binding landed) is only
annotated. A failed write whose Binding landed all the same (its reply was lost) is a success:
the lease must stay. Any other failure propagates, as `OutcomeUnknown` when not even a read
could tell whether the Binding landed; the runner undoes the reservation."""

from __future__ import annotations

import contextlib
import logging
import time

from gpupool.adapters.extender_http.api import ExtenderApi
from gpupool.adapters.extender_http.bind_context import StepTimer
from gpupool.adapters.extender_http.reserve import Reservation
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.pod import allocation_annotation
from gpupool.adapters.wire.names import ANN_ALLOCATION, ANN_LEASE
from gpupool.domain.allocations import Allocation
from gpupool.state.lease import LeaseRecord

log = logging.getLogger(__name__)


class OutcomeUnknown(Exception):
    """The Binding failed and a fresh read of the pod failed too: it may have landed."""


def pod_annotations(lease: LeaseRecord) -> dict[str, str]:
    """What the Binding writes on the pod: its slices and its lease."""
    allocation = Allocation(
        request=lease.pod.name, node=lease.node, cpu_milli=0, memory_mib=0, slices=lease.slices
    )
    return {ANN_ALLOCATION: allocation_annotation(allocation), ANN_LEASE: lease.key}


async def write_binding(
    api: ExtenderApi, pod: ScheduledPod, node: str, reservation: Reservation, timer: StepTimer
) -> None:
    """The Binding (or the annotations a bound pod is owed); raises when it did not land."""
    annotations = pod_annotations(reservation.lease)
    t = time.perf_counter()
    try:
        if pod.node_name:  # a retried bind whose Binding landed: only the annotation is owed
            await api.annotate_pod(pod.namespace, pod.name, annotations)
        else:  # the Binding's annotations land on the pod with its nodeName, atomically
            await api.bind_pod(pod.namespace, pod.name, pod.uid, node, annotations)
    except Exception as err:
        log.warning("bind %s to %s failed after the reservation: %s", pod.ref, node, err)
        landed = await bound_anyway(api, pod, node)
        if landed is None:
            raise OutcomeUnknown(str(err)) from err
        if not landed:
            raise
        if reservation.new and not pod.node_name:  # an earlier Binding won: annotate
            with contextlib.suppress(Exception):
                await api.annotate_pod(pod.namespace, pod.name, annotations)
        return  # the Binding landed; only its reply was lost
    timer.done("binding", t)


async def bound_anyway(api: ExtenderApi, pod: ScheduledPod, node: str) -> bool | None:
    """After a failed write: is the pod bound to `node` all the same? Then the lease must stay.
    None: the read failed too (the runner undoes the reservation and has the node and the bound
    pods read again before the next plan there, so a Binding that did land is counted)."""
    try:
        fresh = await api.get_pod(pod.namespace, pod.name)
    except Exception:
        return None
    return fresh.uid == pod.uid and fresh.node_name == node
