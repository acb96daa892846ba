"""A pod's GPU request (DESIGN section 3) from its JSON; the allocation annotation back onto it.

CPU and memory are left to kube-scheduler (0 in the request the extender plans with).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire.names import ANN_PLACEMENT_POLICY, DEFAULT_TENANT, LABEL_TENANT
from gpupool.adapters.wire.pods import read_pod_gpu
from gpupool.domain.allocations import Allocation, Slice, extents_from_json
from gpupool.domain.errors import InvalidRequest
from gpupool.domain.requests import Request


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def request_from_pod(pod: Mapping[str, Any]) -> Request:
    """The domain Request of a pod (no GPU: `wants_gpu` is False); the webhook's parser
    (`gpupool.adapters.wire.pods.read_pod_gpu`) so both read a pod the same way. Raises
    InvalidRequest/InvalidQuantity/UnknownGpuModel if the pod is malformed."""
    meta = pod.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    gpu = read_pod_gpu(pod, tenant=labels.get(LABEL_TENANT) or DEFAULT_TENANT)
    if gpu is None:
        return Request(name=pod_key(pod))
    return gpu.request


def placement_policy(pod: Mapping[str, Any]) -> str | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANN_PLACEMENT_POLICY)
    return str(value).strip() if value else None


def allocation_annotation(allocation: Allocation) -> str:
    """The `gpupool.io/allocation` annotation: a JSON list, one object per GPU."""
    return json.dumps([s.to_annotation() for s in allocation.slices], separators=(",", ":"))


def _slice_of(item: Mapping[str, Any]) -> Slice:
    offset, size = int(item["offsetBytes"]), int(item["sizeBytes"])
    return Slice(
        gpu_index=int(item["index"]),
        uuid=str(item["uuid"]),
        model=str(item["model"]),
        offset_bytes=offset,
        size_bytes=size,
        compute_milli=int(item.get("computePercent", 0)) * 10,
        extents=extents_from_json(item.get("extents"), offset, size),
    )


def slices_from_annotation(text: str, *, who: str = "pod") -> tuple[Slice, ...]:
    """Parse a `gpupool.io/allocation` annotation back into slices."""
    try:
        items = json.loads(text)
        return tuple(_slice_of(item) for item in items)
    except (ValueError, TypeError, KeyError) as err:
        raise InvalidRequest(f"{who}: malformed gpupool.io/allocation annotation: {err}") from None
