"""Bind's first two steps, before anything is held: `decode` (which pod) and `check` (may it go
to that node at all). kube-scheduler asked filter first, but /bind trusts no one."""

from __future__ import annotations

import time

from gpupool.adapters.extender_http.api import ExtenderApi
from gpupool.adapters.extender_http.bind_context import StepTimer
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.extender_http.wire import ExtenderBindingArgs
from gpupool.state.cluster import ClusterCache


async def decode(
    api: ExtenderApi, args: ExtenderBindingArgs, kept: ScheduledPod | None, timer: StepTimer
) -> ScheduledPod | Refusal:
    """The pod to bind: `kept` (the copy filter decoded), else a fresh read; refused when its
    uid is not the one kube-scheduler binds."""
    pod = kept
    if pod is None:
        t = time.perf_counter()
        pod = await api.get_pod(args.pod_namespace, args.pod_name)
        timer.done("get_pod", t)
    if pod.uid != args.pod_uid:
        return Refusal(
            Why.REPLACED,
            f"pod {args.pod_namespace}/{args.pod_name} has uid {pod.uid or None}, "
            f"not {args.pod_uid}: it was replaced",
        )
    return pod


def check(cache: ClusterCache, pod: ScheduledPod, node: str) -> Refusal | None:
    """Why the pod may not go to `node` whatever is free there: its request cannot be read, asks
    for no GPU or was never admitted; the node is unknown or the pod's own spec excludes it."""
    refused = pod.refusal()
    if refused is not None:
        return refused
    node_object = cache.nodes.get(node)
    if node_object is None:
        return Refusal(Why.UNKNOWN_NODE, f"node {node} is not in the extender's cache")
    return pod.excluded_from(node_object)
