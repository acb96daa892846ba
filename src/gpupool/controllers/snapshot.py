"""What the controllers see of the API server, as plain values (pure: no I/O, no clock).

`read_pod` turns a pod's JSON into a PodView; the reconcilers list objects, build views and pass
them to the pure planners. Nothing here is kept between reconciles: every decision is made again
from the API server's state, so a restarted controller converges to the same place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.wire import names
from gpupool.adapters.wire.admitted import Admitted
from gpupool.adapters.wire.pods import read_pod_gpu
from gpupool.adapters.wire.times import parse_time
from gpupool.controllers.node_match import NodeConstraints
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import Request

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    uid: str
    tenant: str
    priority: int
    submitted_at: float  # the webhook's queued-at stamp, else the creation time
    request: Request | None  # None: asks for no GPU
    problem: str | None  # the request could not be read (the pod predates a rule, or was edited)
    gated: bool  # still carries the gpupool.io/quota scheduling gate
    gate_index: int  # its position in spec.schedulingGates (-1 when not gated)
    phase: str
    deleting: bool
    node: str | None
    admitted: Admitted | None
    queue_note: str | None  # the current gpupool.io/queue annotation
    allocation_models: tuple[str, ...] = ()
    reclaim_notice: str | None = None
    # kube-scheduler found no node for it: condition PodScheduled=False, reason Unschedulable
    unschedulable: bool = False
    # which nodes it may run on by its spec (nodeSelector, required node affinity, tolerations)
    constraints: NodeConstraints = field(default_factory=NodeConstraints)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def holds_quota(self) -> bool:
        """An admitted GPU pod that has not finished: it counts against its tenant's quota
        (a pod being deleted counts until it is gone: its GPU may still be in use)."""
        return not self.gated and not self.terminal and self.request is not None


def read_pod(pod: Mapping[str, Any]) -> PodView:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    tenant = str(labels.get(names.LABEL_TENANT) or names.DEFAULT_TENANT)
    raw_priority = spec.get("priority")
    priority = raw_priority if isinstance(raw_priority, int) else 0
    request: Request | None = None
    problem: str | None = None
    try:
        gpu = read_pod_gpu(pod, tenant=tenant, priority=priority)
        request = None if gpu is None else gpu.request
    except GpupoolError as err:
        problem = str(err)
    gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    gate_index = gates.index(names.QUOTA_GATE) if names.QUOTA_GATE in gates else -1
    submitted = parse_time(annotations.get(names.ANN_QUEUED_AT))
    if submitted is None:
        submitted = parse_time(meta.get("creationTimestamp")) or 0.0
    models: tuple[str, ...] = ()
    try:
        allocation = json.loads(annotations.get(names.ANN_ALLOCATION) or "[]")
        models = tuple(str(s.get("model")) for s in allocation if isinstance(s, dict))
    except (ValueError, TypeError):
        models = ()
    return PodView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        tenant=tenant,
        priority=priority,
        submitted_at=submitted,
        request=request,
        problem=problem,
        gated=gate_index >= 0,
        gate_index=gate_index,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        node=spec.get("nodeName") or None,
        admitted=Admitted.from_annotation(annotations.get(names.ANN_ADMITTED)),
        queue_note=annotations.get(names.ANN_QUEUE),
        allocation_models=models,
        reclaim_notice=annotations.get(names.ANN_RECLAIM_NOTICE),
        unschedulable=_unschedulable(status),
        constraints=NodeConstraints.of_spec(spec),
    )


def _unschedulable(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return False
