"""Kubernetes objects as the API server holds them (plain JSON dicts), for tests to feed the cache,
the extender, the audit or the API server itself. Each builder gives a minimal valid object and
takes keyword arguments for what a test varies; anything else a test needs it sets on the dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GPU_MODEL = "gpupool.io/gpu-model"  # the node labels the node agent sets
GPU_COUNT = "gpupool.io/gpu-count"
GPU_MEMORY = "gpupool.io/gpu-memory"  # the extended resources a GPU pod asks for
VGPU = "gpupool.io/vgpu"
IMAGE = "registry.example/never-pulled:1"  # nothing runs it: kwok fakes the containers


def gpu_labels(model: str, cards: int) -> dict[str, str]:
    """The labels a GPU node carries: its card model and how many."""
    return {GPU_MODEL: model, GPU_COUNT: str(cards)}


def node_json(
    name: str,
    *,
    cards: int = 0,
    model: str = "A100-80GB",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Ready Node. `cards` > 0: a GPU node (`gpu_labels(model, cards)`); `labels` are added."""
    all_labels = {**(gpu_labels(model, cards) if cards else {}), **(labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod_json(
    name: str,
    *,
    namespace: str | None = None,
    uid: str | None = None,
    gpu_memory: str | None = None,
    vgpu: int | None = None,
    limits: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_name: str | None = None,
    hostname: str | None = None,
    priority_class: str | None = None,
    scheduler_name: str | None = None,
    gates: Sequence[str] = (),
    grace_s: int | None = None,
    requests_too: bool = False,
    phase: str | None = None,
) -> dict[str, Any]:
    """A Pod with one container. Its limits: `gpu_memory` (e.g. "12Gi"), `vgpu` (the device
    plugin's resource) and any others in `limits`; `requests_too` repeats them as requests.
    `node_name` binds it; `hostname` pins it with a nodeSelector on kubernetes.io/hostname;
    `scheduler_name` names the scheduler (one that does not exist: no scheduler takes it);
    `gates` are schedulingGates; `grace_s` is terminationGracePeriodSeconds; `phase` a status."""
    wanted = dict(limits or {})
    if gpu_memory is not None:
        wanted[GPU_MEMORY] = gpu_memory
    if vgpu is not None:
        wanted[VGPU] = str(vgpu)
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if wanted:
        container["resources"] = {
            "limits": wanted,
            **({"requests": wanted} if requests_too else {}),
        }
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {"containers": [container]}
    if node_name is not None:
        spec["nodeName"] = node_name
    if hostname is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": hostname}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj
