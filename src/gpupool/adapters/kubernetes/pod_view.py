"""A pod's JSON → the typed `state.pods.PodView`: gpupool's one pod decoder (decoded once, here).

Everything that reads a pod reads this value: the controllers' plans, the web view, and the
extender (its `ScheduledPod` wraps the view, with the request it plans). Callers go through
`adapters.kubernetes.decoded.read_pod`, which remembers each decoded pod by uid and
resourceVersion, so the same pod version is decoded once per process however often it is listed,
sent by kube-scheduler, fetched for a bind or listed as a gang member.
`tests/unit/wire/test_one_pod_decoder.py` fails when another module starts parsing gpupool.io
pod annotations.

The reconcilers list objects, build views and pass them to the pure planners. Nothing is kept
between reconciles: every decision is made again from the API server's state, so a restarted
controller converges to the same place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.adapters.kubernetes.pod import slices_from_annotation
from gpupool.adapters.wire import names
from gpupool.adapters.wire.admitted import parse_admitted
from gpupool.adapters.wire.claim_request import from_annotation, request_of
from gpupool.adapters.wire.gangs import read_gang
from gpupool.adapters.wire.lease_terms import capped_pod_ttl
from gpupool.adapters.wire.pods import PodGpu, read_pod_gpu
from gpupool.adapters.wire.reclaim_notice import parse_notice
from gpupool.adapters.wire.times import parse_time
from gpupool.domain.allocations import Slice
from gpupool.domain.compute_modes import WorkloadClass
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import Request
from gpupool.state.claim_ask import ClaimAsk
from gpupool.state.pods import Expression, NodeConstraints, PodView


def read_expressions(items: object) -> tuple[Expression, ...]:
    out: list[Expression] = []
    for item in items if isinstance(items, Sequence) else ():
        if isinstance(item, Mapping):
            values = item.get("values") or ()
            out.append(
                (
                    str(item.get("key") or ""),
                    str(item.get("operator") or ""),
                    tuple(str(v) for v in values) if isinstance(values, Sequence) else (),
                )
            )
    return tuple(out)


def _mapping(value: object) -> Mapping[str, Any]:
    """`value` where the schema has an object, else empty (the decoder reads untrusted JSON)."""
    return value if isinstance(value, Mapping) else {}


def _has_preferences(spec: Mapping[str, Any]) -> bool:
    """Whether the spec asks kube-scheduler's scoring for something: a preferred node affinity
    or pod (anti-)affinity term, or a topology spread constraint that is only scored."""
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            part = affinity.get(kind)
            if isinstance(part, Mapping) and part.get(
                "preferredDuringSchedulingIgnoredDuringExecution"
            ):
                return True
    spreads = spec.get("topologySpreadConstraints")
    return isinstance(spreads, Sequence) and any(
        isinstance(c, Mapping) and c.get("whenUnsatisfiable") == "ScheduleAnyway" for c in spreads
    )


def read_constraints(spec: Mapping[str, Any]) -> NodeConstraints:
    """The pod spec's node constraints (nodeSelector, required node affinity, tolerations) and
    whether it has soft preferences kube-scheduler scores."""
    selector = _mapping(spec.get("nodeSelector"))
    node_affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    listed = required.get("nodeSelectorTerms")
    terms = tuple(
        (read_expressions(t.get("matchExpressions")), read_expressions(t.get("matchFields")))
        for t in (listed if isinstance(listed, Sequence) else ())
        if isinstance(t, Mapping)
    )
    given = spec.get("tolerations")
    tolerations = tuple(
        (
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in (given if isinstance(given, Sequence) else ())
        if isinstance(t, Mapping)
    )
    pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items()))
    return NodeConstraints(pairs, terms, tolerations, preferences=_has_preferences(spec))


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
    gpu: PodGpu | None = None
    claim_pod = False
    ask: ClaimAsk | None = None
    try:
        gpu = read_pod_gpu(pod, tenant=tenant, priority=priority)
        request = None if gpu is None else gpu.request
        claim_pod = gpu is None and names.ANN_CLAIM in annotations
        if claim_pod:  # a claim pod: its claim's ask
            who = f"pod {meta.get('namespace')}/{meta.get('name')}"
            ask = from_annotation(str(annotations[names.ANN_CLAIM]), who)
            request = request_of(ask, str(meta.get("name") or ""), tenant, priority)
    except GpupoolError as err:
        problem = str(err)
    gang = None
    try:
        gang = read_gang(meta)
    except GpupoolError as err:  # the webhook refuses it at create: a pod that predates a rule
        problem = problem or str(err)
    gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    gate_index = gates.index(names.QUOTA_GATE) if names.QUOTA_GATE in gates else -1
    submitted = parse_time(annotations.get(names.ANN_QUEUED_AT))
    if submitted is None:
        submitted = parse_time(meta.get("creationTimestamp")) or 0.0
    models: tuple[str, ...] = ()
    allocation: tuple[Slice, ...] = ()
    allocation_problem: str | None = None
    text = annotations.get(names.ANN_ALLOCATION)
    if text:
        try:
            allocation = slices_from_annotation(str(text), who=f"pod {meta.get('name')}")
            models = tuple(s.model for s in allocation)
        except GpupoolError as err:
            allocation_problem = str(err)
            models = _models_of_unreadable(str(text))
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
        admitted=parse_admitted(annotations.get(names.ANN_ADMITTED)),
        queue_note=annotations.get(names.ANN_QUEUE),
        allocation_models=models,
        allocation=allocation,
        allocation_problem=allocation_problem,
        reclaim_notice=parse_notice(annotations.get(names.ANN_RECLAIM_NOTICE)),
        unschedulable=_unschedulable(status),
        bound_at=_bound_at(status),
        constraints=read_constraints(spec),
        lease_ttl_s=capped_pod_ttl(annotations),
        renewal=annotations.get(names.ANN_RENEW),
        expiry_notice=parse_notice(annotations.get(names.ANN_EXPIRY_NOTICE)),
        drain_notice=parse_notice(annotations.get(names.ANN_DRAIN_NOTICE)),
        gang=gang,
        labels={str(k): str(v) for k, v in labels.items()},
        has_owner=any(
            isinstance(o, Mapping) and o.get("controller") is True
            for o in meta.get("ownerReferences") or ()
        ),
        defrag_notice=parse_notice(annotations.get(names.ANN_DEFRAG_NOTICE)),
        placement_policy=None if gpu is None else gpu.placement_policy,
        compute_mode=None if gpu is None else gpu.compute_mode,
        workload=WorkloadClass.INFERENCE if gpu is None else _workload(gpu),
        claim_pod=claim_pod,
        claim_ask=ask,
        claim_name=None if ask is None else claim_name(pod, ask.pod_claim),
        annotated=meta.get("annotations") is not None,
    )


def claim_name(pod: Mapping[str, Any], entry: str) -> str | None:
    """The name of the ResourceClaim the pod's claim entry stands for: `resourceClaimName`, or
    the claim kube-controller-manager made from the template (`status.resourceClaimStatuses`);
    None while it is not made."""
    for claim in (pod.get("spec") or {}).get("resourceClaims") or ():
        named = isinstance(claim, Mapping) and claim.get("name") == entry
        if named and claim.get("resourceClaimName"):
            return str(claim["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        named = isinstance(status, Mapping) and status.get("name") == entry
        if named and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    return None


def _workload(gpu: PodGpu) -> WorkloadClass:
    """gpupool.io/workload (validated by `read_pod_gpu`); inference when unset."""
    return WorkloadClass.parse(gpu.workload) if gpu.workload else WorkloadClass.INFERENCE


def _models_of_unreadable(text: str) -> tuple[str, ...]:
    """The card models an allocation annotation names even when its slices cannot be read (the
    admission queue charges a bound pod by them); () when it is not a JSON list at all."""
    try:
        items = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(items, list):
        return ()
    return tuple(str(s.get("model")) for s in items if isinstance(s, dict))


def _bound_at(status: Mapping[str, Any]) -> float | None:
    for condition in status.get("conditions") or ():
        scheduled = isinstance(condition, Mapping) and condition.get("type") == "PodScheduled"
        if scheduled and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _unschedulable(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return False
