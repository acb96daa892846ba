"""A Deployment's or StatefulSet's JSON → the typed `state.workload.ScalableWorkload` the
autoscaler's plan reads (decoded once, here). A pod's labels and a node's address are their
decoders' (`PodView.labels`, `NodeObject.address`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.kubernetes.node import node_address as node_address  # its home
from gpupool.adapters.kubernetes.pod_view import read_expressions
from gpupool.adapters.wire import names
from gpupool.adapters.wire.autoscale import parse_record, read_policy
from gpupool.domain.errors import GpupoolError
from gpupool.placement.autoscale import ScalePolicy
from gpupool.state.workload import LabelSelector, ScalableWorkload


def read_selector(selector: Mapping[str, Any] | None) -> LabelSelector:
    selector = selector or {}
    labels = selector.get("matchLabels") or {}
    return LabelSelector(
        tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        read_expressions(selector.get("matchExpressions")),
    )


def read_workload(obj: Mapping[str, Any], kind: str) -> ScalableWorkload:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    policy: ScalePolicy | None = None
    problem: str | None = None
    try:
        policy = read_policy(annotations)
    except GpupoolError as err:
        problem = str(err)
    replicas = spec.get("replicas")
    return ScalableWorkload(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        replicas=replicas if isinstance(replicas, int) else 1,  # the API's default
        selector=read_selector(spec.get("selector")),
        policy=policy,
        problem=problem,
        record=parse_record(annotations.get(names.ANN_AUTOSCALE_STATUS)),
    )
