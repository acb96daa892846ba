"""A pod's GPU request, read from its JSON: the resources and annotations of DESIGN.md section 3.

`read_pod_gpu` validates as it reads and raises one typed error per kind of bad input, each
saying what to write instead: InvalidQuantity (GPU memory), InvalidRequest (compute, count,
annotations, containers, fields the system owns), UnknownGpuModel (a model name), and
RequestExceedsCluster (more memory per GPU than any card it may land on has: the
cluster's cards when the caller knows them, else the catalogue's). A pod that asks
for no GPU reads as None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire import names
from gpupool.domain.errors import (
    InvalidQuantity,
    InvalidRequest,
    QuantityOutOfRange,
    RequestExceedsCluster,
)
from gpupool.domain.models import CATALOGUE, get_model, parse_model_list
from gpupool.domain.quantity import format_quantity, parse_quantity
from gpupool.domain.requests import Request
from gpupool.domain.units import format_bytes
from gpupool.placement.policies import POLICIES

_MAX_GPUS = 64


@dataclass(frozen=True, slots=True)
class PodGpu:
    """What a pod asks of the GPU pool, read from one container's resources and the annotations."""

    container: int  # index in spec.containers of the container that asks for GPUs
    container_name: str
    request: Request
    compute_mode: str | None = None
    placement_policy: str | None = None
    workload: str | None = None  # gpupool.io/workload: inference | training

    @property
    def memory_bytes(self) -> int | None:
        """GPU memory per GPU (None: whole cards)."""
        return self.request.gpu_memory_bytes

    @property
    def compute_pct(self) -> int | None:
        return self.request.compute_pct

    @property
    def gpu_count(self) -> int:
        return self.request.gpu_count


def _quoted(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _resource_value(resources: Mapping[str, Any], name: str, where: str) -> object | None:
    """The value of one gpupool resource: limits, else requests; both must agree."""
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    limit, request = limits.get(name), requests.get(name)
    if limit is not None and request is not None and str(limit) != str(request):
        raise InvalidRequest(
            f"{where}: requests of {name} must equal its limits; got requests {_quoted(request)} "
            f"and limits {_quoted(limit)} (set only limits)"
        )
    return limit if limit is not None else request


def _memory(value: object, where: str) -> int:
    problem = (
        f'{where}{names.RES_GPU_MEMORY} must be a positive quantity such as 12Gi; got "{value}"'
    )
    try:
        amount = parse_quantity(value, what=f"{where}{names.RES_GPU_MEMORY}")
    except QuantityOutOfRange:
        raise
    except InvalidQuantity:
        raise InvalidQuantity(problem) from None
    if amount <= 0:
        raise InvalidQuantity(problem)
    if amount.denominator != 1:
        raise InvalidQuantity(
            f"{where}{names.RES_GPU_MEMORY} must be a whole number of bytes such as 12Gi or "
            f'500Mi; got "{value}"'
        )
    return int(amount)


def whole_number(value: object, name: str, low: int, high: int, example: str, where: str) -> int:
    """A whole-number quantity in [low, high], else InvalidRequest; `where` prefixes the message
    (with its own separator, e.g. "container 'x': ")."""
    problem = (
        f"{where}{name} must be a whole number from {low} to {high} such as {example}; "
        f'got "{value}"'
    )
    try:
        amount = parse_quantity(value, what=name)
    except QuantityOutOfRange:
        raise InvalidRequest(f"{problem} (beyond the largest quantity gpupool reads)") from None
    except InvalidQuantity:
        raise InvalidRequest(problem) from None
    if amount.denominator != 1 or not low <= amount <= high:
        raise InvalidRequest(problem)
    return int(amount)


def _flag(annotations: Mapping[str, str], name: str) -> bool:
    value = annotations.get(name)
    if value is None:
        return False
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidRequest(f'annotation {name} must be "true" or "false"; got {_quoted(value)}')
    return text == "true"


def _choice(annotations: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    value = annotations.get(name)
    if value is None:
        return None
    text = str(value).strip().lower()
    if text not in allowed:
        raise InvalidRequest(
            f"annotation {name} must be one of {', '.join(allowed)}; got {_quoted(value)}"
        )
    return text


def _models(annotations: Mapping[str, str], name: str) -> tuple[str, ...]:
    value = annotations.get(name)
    if value is None:
        return ()
    try:
        return parse_model_list(str(value))
    except Exception as err:  # UnknownGpuModel: say which annotation held the name
        raise type(err)(f"annotation {name}: {err}") from None


def _check_fits_a_card(
    memory: int, models: tuple[str, ...], where: str, cards: Sequence[tuple[str, int]]
) -> None:
    """RequestExceedsCluster when no card can hold `memory`: the cluster's cards (model,
    allocatable bytes) of the allowed models when it has any, else the catalogue's."""
    fitting = [(size, model) for model, size in cards if not models or model in models]
    if fitting:
        largest, model = max(fitting)
        if memory > largest:
            raise RequestExceedsCluster(
                f"{where}{names.RES_GPU_MEMORY} asks for {format_bytes(memory)} per GPU but the "
                f"largest {'|'.join(models) + ' ' if models else ''}card in this cluster "
                f"({model}) has {format_bytes(largest)} allocatable; ask for less, or for more "
                f"GPUs"
            )
        return
    if models:
        sizes = [get_model(m).memory_bytes for m in models]
        if any(size is None for size in sizes):
            return  # a listed model of unknown size (a trace code) might be large enough
    else:  # any card: the largest known one bounds it (G2/G3 are trace codes, not real cards)
        sizes = [m.memory_bytes for m in CATALOGUE if m.memory_bytes is not None]
    largest = max(size for size in sizes if size is not None)
    if memory > largest:
        scope = f"the largest of {'|'.join(models)}" if models else "the largest GPU gpupool knows"
        raise RequestExceedsCluster(
            f"{where}{names.RES_GPU_MEMORY} asks for {format_bytes(memory)} per GPU but "
            f"{scope} has {format_bytes(largest)}; ask for less, or for more GPUs"
        )


def pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "?"
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def read_pod_gpu(
    pod: Mapping[str, Any],
    *,
    tenant: str = names.DEFAULT_TENANT,
    priority: int | None = None,
    cluster_cards: Sequence[tuple[str, int]] = (),
) -> PodGpu | None:
    """The pod's GPU request, validated; None when it asks for no GPU. `cluster_cards` (model,
    allocatable bytes per card) bound the memory a GPU may ask; without them, the catalogue."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    for key in ("initContainers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") or {}
            asked = [
                n
                for n in (*names.USER_RESOURCES, names.RES_VGPU)
                if n in (resources.get("limits") or {}) or n in (resources.get("requests") or {})
            ]
            if asked:
                raise InvalidRequest(
                    f"{key[:-1]} {container.get('name', '?')!r} asks for {', '.join(asked)}; only "
                    f"regular containers may use GPUs"
                )
    gpu_containers: list[tuple[int, Mapping[str, Any]]] = []
    for index, container in enumerate(spec.get("containers") or []):
        resources = container.get("resources") or {}
        listed = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if any(n in listed for n in names.USER_RESOURCES):
            gpu_containers.append((index, container))
        elif names.RES_VGPU in listed:
            raise InvalidRequest(
                f"container {container.get('name', '?')!r}: {names.RES_VGPU} is set by gpupool; "
                f"ask for {names.RES_GPU_MEMORY} (and {names.RES_GPU_COMPUTE}) instead"
            )
    if not gpu_containers:
        return None
    if len(gpu_containers) > 1:
        listing = ", ".join(repr(c.get("name", "?")) for _, c in gpu_containers)
        raise InvalidRequest(
            f"containers {listing} all ask for GPUs; only one container per pod may (put the "
            f"GPU work in one container)"
        )
    index, container = gpu_containers[0]
    cname = str(container.get("name", "?"))
    where = f"container {cname!r}: "
    resources = container.get("resources") or {}

    raw_memory = _resource_value(resources, names.RES_GPU_MEMORY, where[:-2])
    raw_compute = _resource_value(resources, names.RES_GPU_COMPUTE, where[:-2])
    raw_count = _resource_value(resources, names.RES_GPU, where[:-2])
    memory = None if raw_memory is None else _memory(raw_memory, where)
    compute = (
        None
        if raw_compute is None
        else whole_number(raw_compute, names.RES_GPU_COMPUTE, 1, 100, "30", where)
    )
    count = (
        1 if raw_count is None else whole_number(raw_count, names.RES_GPU, 1, _MAX_GPUS, "1", where)
    )

    models = _models(annotations, names.ANN_GPU_MODEL)
    preferred = _models(annotations, names.ANN_PREFER_GPU_MODEL)
    avoided = _models(annotations, names.ANN_AVOID_GPU_MODEL)
    if models and avoided and set(models) <= set(avoided):
        raise InvalidRequest(
            f"annotation {names.ANN_AVOID_GPU_MODEL} ({'|'.join(avoided)}) avoids every model "
            f"{names.ANN_GPU_MODEL} allows ({'|'.join(models)}), so it could never choose "
            f"between them; avoid fewer models, or allow more"
        )
    exclusive = _flag(annotations, names.ANN_EXCLUSIVE)
    mode = _choice(annotations, names.ANN_COMPUTE_MODE, names.COMPUTE_MODES)
    workload = _choice(annotations, names.ANN_WORKLOAD, names.WORKLOAD_CLASSES)
    policy = annotations.get(names.ANN_PLACEMENT_POLICY)
    if policy is not None and str(policy).strip() not in POLICIES:
        raise InvalidRequest(
            f"annotation {names.ANN_PLACEMENT_POLICY} must be one of {', '.join(POLICIES)}; "
            f"got {_quoted(policy)}"
        )
    if memory is not None:
        _check_fits_a_card(memory, models, where, cluster_cards)
    if priority is None:
        raw_priority = spec.get("priority")
        priority = int(raw_priority) if isinstance(raw_priority, int) else 0
    request = Request(
        name=pod_name(pod),
        gpu_count=count,
        gpu_memory_bytes=memory,
        compute_pct=compute,
        models=models,
        preferred_models=preferred,
        avoided_models=avoided,
        exclusive=exclusive,
        tenant=tenant,
        priority=priority,
    )
    return PodGpu(
        container=index,
        container_name=cname,
        request=request,
        compute_mode=mode,
        placement_policy=None if policy is None else str(policy).strip(),
        workload=workload,
    )


def gpu_resources(gpu: PodGpu) -> dict[str, str]:
    """The normalised gpupool resources of the GPU container (limits and requests alike)."""
    out: dict[str, str] = {names.RES_GPU: str(gpu.gpu_count), names.RES_VGPU: str(gpu.gpu_count)}
    if gpu.memory_bytes is not None:
        out[names.RES_GPU_MEMORY] = format_quantity(gpu.memory_bytes)
    if gpu.compute_pct is not None:
        out[names.RES_GPU_COMPUTE] = str(gpu.compute_pct)
    return out
