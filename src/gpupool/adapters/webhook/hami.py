"""HAMi's pod names read as gpupool's, at admission (pure): a HAMi manifest runs unchanged.

A pod is a *HAMi pod* when a container asks for one of `HAMI_RESOURCES` or the pod carries one
of `HAMI_ANNOTATIONS`. Such a pod is rewritten into gpupool's names before anything else reads
it (then it is validated, stamped and gated like any gpupool pod), and every name translated
gets a warning in the admission response, which kubectl prints. The table (docs/hami.md):

| HAMi                                   | gpupool                                              |
|----------------------------------------|------------------------------------------------------|
| `nvidia.com/gpu: N` (cards)            | `gpupool.io/gpu: N`                                  |
| `nvidia.com/gpumem: M` (MiB per card)  | `gpupool.io/gpu-memory: <M>Mi`                       |
| `nvidia.com/gpumem-percentage: P`      | 100: the whole card; less: P% of the allocatable     |
|                                        | memory of the cards it may land on (one size only)   |
| `nvidia.com/gpucores: C` (% of SMs)    | `gpupool.io/gpu-compute: C`; 0 (HAMi: no cap): none  |
| `nvidia.com/use-gputype: A100,V100`    | `gpupool.io/gpu-model`: the models whose name or     |
|                                        | alias contains a listed name (HAMi's match)          |
| `nvidia.com/nouse-gputype: T4`         | `gpupool.io/gpu-model`: every other model            |
| `nvidia.com/use-gpuuuid`, `nouse-gpuuuid`, `nvidia.com/priority` | refused: no equivalent    |
| `spec.schedulerName: hami-scheduler`   | a scheduler that calls gpupool's extender            |

`nvidia.com/gpu` alone does not make a HAMi pod: it is also the resource of NVIDIA's own device
plugin, whose pods must neither be rewritten nor wait for gpupool's webhook. A pod that uses
both kinds of names is refused (MixedResourceNames), and so is a bad HAMi value, each with a
message that names the HAMi field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire import names
from gpupool.adapters.wire.pods import whole_number
from gpupool.domain.errors import InvalidQuantity, InvalidRequest, UnknownGpuModel
from gpupool.domain.models import CATALOGUE, GpuModel
from gpupool.domain.quantity import format_quantity, parse_quantity
from gpupool.domain.units import MiB, format_bytes

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
PRIORITY = "nvidia.com/priority"
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"

HAMI_SCHEDULER = "hami-scheduler"  # the schedulerName HAMi's webhook writes

HAMI_RESOURCES = (GPUMEM, GPUMEM_PERCENTAGE, GPUCORES, PRIORITY)  # what makes a HAMi pod
HAMI_ANNOTATIONS = (USE_GPUTYPE, NOUSE_GPUTYPE, USE_GPUUUID, NOUSE_GPUUUID)
_ALL_RESOURCES = (GPU, *HAMI_RESOURCES)
_GPUPOOL_RESOURCES = (*names.USER_RESOURCES, names.RES_VGPU)
_MAX_GPUS = 64
_VENDOR_PREFIXES = ("NVIDIA-", "TESLA-", "GEFORCE-")

# What gpupool cannot honour, and what to write instead.
_UNSUPPORTED = {
    USE_GPUUUID: "gpupool places pods by GPU model, not on a card chosen by its UUID; remove it "
    f"(use {USE_GPUTYPE}, or a nodeSelector for one node)",
    NOUSE_GPUUUID: "gpupool places pods by GPU model, not around cards chosen by UUID; remove it "
    f"(use {NOUSE_GPUTYPE} to keep off a model; a card gpupool sees failing is cordoned)",
    PRIORITY: "gpupool does not rank pods sharing a card by HAMi's task priority; remove it "
    "(spec.priorityClassName orders gpupool's queue and reclaim)",
}


class MixedResourceNames(InvalidRequest):
    """A pod uses HAMi's names and gpupool's together."""


@dataclass(frozen=True, slots=True)
class Translation:
    """The pod as gpupool reads it, and one warning per HAMi name translated."""

    pod: Mapping[str, Any]
    warnings: tuple[str, ...] = ()


def _listed(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    return {**(resources.get("requests") or {}), **(resources.get("limits") or {})}


def _containers(pod: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get(key) or [])


def is_hami_pod(pod: Mapping[str, Any]) -> bool:
    """True when the pod asks for a HAMi-only resource or carries a HAMi annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if any(a in annotations for a in HAMI_ANNOTATIONS):
        return True
    return any(
        r in _listed(c)
        for key in ("containers", "initContainers")
        for c in _containers(pod, key)
        for r in HAMI_RESOURCES
    )


def _marks(
    pod: Mapping[str, Any], annotation_names: tuple[str, ...], resource_names: tuple[str, ...]
) -> list[str]:
    """The names of `annotation_names` the pod carries, then of `resource_names` it asks for."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    found = [a for a in annotation_names if a in annotations]
    for key in ("containers", "initContainers"):
        for c in _containers(pod, key):
            found.extend(r for r in resource_names if r in _listed(c) and r not in found)
    return found


def check_not_mixed(pod: Mapping[str, Any]) -> None:
    """MixedResourceNames when the pod asks in gpupool's names and in HAMi's (or NVIDIA's
    `nvidia.com/gpu`) at once: no translation could say which it means."""
    ours = _marks(pod, names.USER_ANNOTATIONS, _GPUPOOL_RESOURCES)
    theirs = _marks(pod, HAMI_ANNOTATIONS, _ALL_RESOURCES)
    if ours and theirs:
        raise MixedResourceNames(
            f"the pod mixes HAMi's names ({', '.join(theirs)}) with gpupool's "
            f"({', '.join(ours)}); write its GPU request in one kind only: gpupool's, or "
            f"HAMi's alone, which gpupool translates (docs/hami.md)"
        )


def _value(container: Mapping[str, Any], name: str, where: str) -> object | None:
    resources = container.get("resources") or {}
    limit = (resources.get("limits") or {}).get(name)
    request = (resources.get("requests") or {}).get(name)
    if limit is not None and request is not None and str(limit) != str(request):
        raise InvalidRequest(
            f"{where}: requests of {name} must equal its limits; got requests {request!r} and "
            f"limits {limit!r} (set only limits)"
        )
    return limit if limit is not None else request


def _mebibytes(value: object, where: str) -> int:
    text = str(value).strip()
    if text.endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")):
        raise InvalidQuantity(
            f"{where}: {GPUMEM} counts MiB as a plain number, such as 3000 for 3000 MiB (HAMi's "
            f'unit); got "{value}" (or ask {names.RES_GPU_MEMORY}: {text} instead)'
        )
    problem = f'{where}: {GPUMEM} must be a whole number of MiB such as 3000; got "{value}"'
    try:
        amount = parse_quantity(value, what=GPUMEM)
    except InvalidQuantity:
        raise InvalidQuantity(problem) from None
    if amount.denominator != 1 or amount <= 0:
        raise InvalidQuantity(problem)
    return int(amount)


def _key(text: str) -> str:
    key = text.strip().upper().replace("_", "-").replace(" ", "-")
    for prefix in _VENDOR_PREFIXES:
        key = key.removeprefix(prefix)
    return key


def match_models(annotation: str, text: str) -> tuple[str, ...]:
    """The models a HAMi type list (`A100,V100`) names: a name matches the models whose name or
    alias contains it (HAMi matches the card's type so: `A100` is every A100), except a gpupool
    model's exact name, which matches only that model (`A10` is the A10, not the A100s)."""
    parts = [p for p in text.replace("|", ",").split(",") if p.strip()]
    if not parts:
        raise InvalidRequest(f"annotation {annotation} lists no GPU type; remove it or name one")
    found: dict[str, None] = {}
    for part in parts:
        key = _key(part)
        exact = [m for m in CATALOGUE if _key(m.name) == key]
        hits = exact or [m for m in CATALOGUE if any(key in _key(n) for n in (m.name, *m.aliases))]
        if not hits:
            known = ", ".join(m.name for m in CATALOGUE if m.known)
            raise UnknownGpuModel(
                f"annotation {annotation}: no GPU model gpupool knows matches {part.strip()!r}; "
                f"known models: {known}"
            )
        found.update(dict.fromkeys(m.name for m in hits))
    return tuple(found)


def _allowed_models(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """gpupool's `gpu-model` for the HAMi type annotations; () when neither is set."""
    use = annotations.get(USE_GPUTYPE)
    nouse = annotations.get(NOUSE_GPUTYPE)
    if use is None and nouse is None:
        return ()
    allowed = (
        match_models(USE_GPUTYPE, str(use))
        if use is not None
        else tuple(m.name for m in CATALOGUE if m.known)
    )
    if nouse is not None:
        banned = set(match_models(NOUSE_GPUTYPE, str(nouse)))
        left = tuple(m for m in allowed if m not in banned)
        if not left:
            raise InvalidRequest(
                f"annotation {NOUSE_GPUTYPE} ({nouse}) excludes every GPU type "
                f"{USE_GPUTYPE if use is not None else 'gpupool knows'} allows; the pod could "
                f"never be placed"
            )
        allowed = left
    return allowed


def _card_size(
    percent: int, models: tuple[str, ...], cards: Sequence[tuple[str, int]], where: str
) -> int:
    """The bytes `percent` of a card is on every card the pod may land on: they must agree."""
    sizes = {size for model, size in cards if not models or model in models}
    source = "allocatable on the cluster's GpuNodes"
    if not sizes and models:
        catalogue: list[GpuModel] = [m for m in CATALOGUE if m.name in models]
        sizes = {m.memory_bytes for m in catalogue if m.memory_bytes is not None}
        source = "in gpupool's catalogue (no GpuNode reports one yet)"
    scope = f"the {'|'.join(models)} cards" if models else "the cards"
    if len(sizes) == 1:
        (size,) = sizes
        return (size * percent // 100) // MiB * MiB
    ask = f"ask for {GPUMEM} (MiB per card) instead, or name one card size with {USE_GPUTYPE}"
    if not sizes:
        raise InvalidRequest(
            f"{where}: {GPUMEM_PERCENTAGE}: {percent} is a share of the card the pod lands on, "
            f"and no GpuNode reports a card yet to tell its size; {ask}"
        )
    listing = ", ".join(format_bytes(s) for s in sorted(sizes))
    raise InvalidRequest(
        f"{where}: {GPUMEM_PERCENTAGE}: {percent} is a share of the card the pod lands on, and "
        f"{scope} it may land on differ in size ({listing} {source}), while gpupool reserves "
        f"a fixed amount; {ask}"
    )


def _translate_container(
    container: Mapping[str, Any],
    models: tuple[str, ...],
    cards: Sequence[tuple[str, int]],
    warnings: list[str],
) -> dict[str, Any]:
    """The container with HAMi's resources replaced by gpupool's (limits and requests alike)."""
    where = f"container {container.get('name', '?')!r}"
    listed = _listed(container)
    for name in HAMI_RESOURCES:
        if name in _UNSUPPORTED and name in listed:
            raise InvalidRequest(f"{where}: {name} has no gpupool equivalent: {_UNSUPPORTED[name]}")
    raw_count = _value(container, GPU, where)
    raw_mem = _value(container, GPUMEM, where)
    raw_pct = _value(container, GPUMEM_PERCENTAGE, where)
    raw_cores = _value(container, GPUCORES, where)
    count = (
        1 if raw_count is None else whole_number(raw_count, GPU, 1, _MAX_GPUS, "1", f"{where}: ")
    )
    if raw_mem is not None and raw_pct is not None:
        raise InvalidRequest(
            f"{where}: give either {GPUMEM} (MiB) or {GPUMEM_PERCENTAGE}, not both"
        )
    out: dict[str, str] = {names.RES_GPU: str(count)}
    asked = f"{GPU}: {count}" if raw_count is not None else f"default of 1 {GPU}"
    said = [f"{asked} → {names.RES_GPU}: {count}"]
    if raw_mem is not None:
        mib = _mebibytes(raw_mem, where)
        out[names.RES_GPU_MEMORY] = format_quantity(mib * MiB)
        said.append(f"{GPUMEM}: {mib} → {names.RES_GPU_MEMORY}: {out[names.RES_GPU_MEMORY]}")
    if raw_pct is not None:
        pct = whole_number(raw_pct, GPUMEM_PERCENTAGE, 1, 100, "50", f"{where}: ")
        if pct == 100 or count > 1:
            said.append(f"{GPUMEM_PERCENTAGE}: {pct} → whole cards")
        else:
            size = _card_size(pct, models, cards, where)
            out[names.RES_GPU_MEMORY] = format_quantity(size)
            said.append(
                f"{GPUMEM_PERCENTAGE}: {pct} → {names.RES_GPU_MEMORY}: "
                f"{out[names.RES_GPU_MEMORY]} ({pct}% of the card)"
            )
    if raw_cores is not None:
        cores = whole_number(raw_cores, GPUCORES, 0, 100, "30", f"{where}: ")
        if cores:
            out[names.RES_GPU_COMPUTE] = str(cores)
            said.append(f"{GPUCORES}: {cores} → {names.RES_GPU_COMPUTE}: {cores}")
        else:
            said.append(f"{GPUCORES}: 0 → no compute cap (HAMi's meaning of 0)")
    if count > 1 and (raw_mem is not None or raw_pct is not None):
        said.append(f"gpupool gives {count} GPUs as {count} whole cards")
    warnings.extend(f"{where}: HAMi's {line}" for line in said)
    resources: dict[str, Any] = copy.deepcopy(dict(container.get("resources") or {}))
    for part in ("limits", "requests"):
        kept = {k: v for k, v in dict(resources.get(part) or {}).items() if k not in _ALL_RESOURCES}
        resources[part] = {**kept, **out} if part == "limits" else kept
    return {**container, "resources": resources}


def translate(
    pod: Mapping[str, Any], cards: Sequence[tuple[str, int]], scheduler: str
) -> Translation:
    """The pod in gpupool's names; unchanged (no warnings) unless it is a HAMi pod. `cards`
    (model, allocatable bytes) size `gpumem-percentage`; `scheduler` (one that calls gpupool's
    extender) replaces HAMi's. Raises MixedResourceNames for a pod that uses both kinds,
    InvalidRequest/InvalidQuantity/UnknownGpuModel for a bad HAMi value."""
    check_not_mixed(pod)
    if not is_hami_pod(pod):
        return Translation(pod)
    meta = dict(pod.get("metadata") or {})
    spec = dict(pod.get("spec") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    for name in (USE_GPUUUID, NOUSE_GPUUUID):
        if name in annotations:
            raise InvalidRequest(
                f"annotation {name} has no gpupool equivalent: {_UNSUPPORTED[name]}"
            )
    for init in _containers(pod, "initContainers"):
        asked = [r for r in _ALL_RESOURCES if r in _listed(init)]
        if asked:
            raise InvalidRequest(
                f"initContainer {init.get('name', '?')!r} asks for {', '.join(asked)}; only "
                f"regular containers may use GPUs"
            )
    models = _allowed_models(annotations)
    warnings: list[str] = []
    gpu_containers = [
        i
        for i, c in enumerate(_containers(pod, "containers"))
        if set(_listed(c)) & set(_ALL_RESOURCES)
    ]
    if not gpu_containers:
        hami = sorted(a for a in annotations if a in HAMI_ANNOTATIONS)
        return Translation(
            pod, (f"annotations {', '.join(hami)} have no effect: the pod asks for no GPU",)
        )
    containers = list(spec.get("containers") or [])
    for i in gpu_containers:
        containers[i] = _translate_container(containers[i], models, cards, warnings)
    spec["containers"] = containers
    if spec.get("schedulerName") == HAMI_SCHEDULER:
        spec["schedulerName"] = scheduler
        warnings.append(f"HAMi's spec.schedulerName: {HAMI_SCHEDULER} → {scheduler}")
    for name in (USE_GPUTYPE, NOUSE_GPUTYPE):
        value = annotations.pop(name, None)
        if value is not None:
            warnings.append(
                f"HAMi's annotation {name}: {value} → {names.ANN_GPU_MODEL}: {'|'.join(models)}"
            )
    if models:
        annotations[names.ANN_GPU_MODEL] = "|".join(models)
    meta["annotations"] = annotations
    return Translation({**pod, "metadata": meta, "spec": spec}, tuple(warnings))
