"""HAMi's pod names read as gpupool's, at admission (pure): a HAMi manifest runs unchanged.

A pod is a *HAMi pod* when a container asks for one of `HAMI_RESOURCES` or the pod carries one
of `HAMI_ANNOTATIONS`; with `adopt_nvidia_gpu` (the webhook's default) a pod asking for
`nvidia.com/gpu` is one too, as in HAMi, where `nvidia.com/gpu` alone is a whole card. Such a
pod is rewritten into gpupool's names before anything else reads it (then it is validated,
stamped and gated like any gpupool pod), and every name translated gets a warning in the
admission response, which kubectl prints. The table (docs/hami.md):

| HAMi                                   | gpupool                                              |
|----------------------------------------|------------------------------------------------------|
| `nvidia.com/gpu: N` (cards)            | `gpupool.io/gpu: N`; alone: N whole cards            |
| `nvidia.com/gpumem: M` (MiB per card)  | `gpupool.io/gpu-memory: <M>Mi` on each of the N      |
| `nvidia.com/gpumem-percentage: P`      | 100: whole cards; less: P% of the card's whole       |
|                                        | memory, capped at what the node offers (one size)    |
| `nvidia.com/gpucores: C` (% of SMs)    | `gpupool.io/gpu-compute: C`; 0 (HAMi: no cap): none  |
| `nvidia.com/use-gputype: A100,V100`    | `gpupool.io/gpu-model`: the models whose name or     |
|                                        | alias contains a listed name (HAMi's match)          |
| `nvidia.com/nouse-gputype: T4`         | `gpupool.io/gpu-model`: every other model (names     |
|                                        | gpupool does not know: ignored)                      |
| `hami.io/node-scheduler-policy`        | binpack, spread: `gpupool.io/placement-policy`       |
| `hami.io/gpu-scheduler-policy` and the | binpack: what gpupool does anyway; the rest ignored, |
| other `HAMI_POLICY_ANNOTATIONS`        | each with a warning (vgpu-mode mps: compute-mode)    |
| `nvidia.com/use-gpuuuid`, `nouse-gpuuuid`, `nvidia.com/priority` | refused: no equivalent    |
| `nvidia.com/mig-*` resources           | refused: gpupool does not make MIG instances yet     |
| `spec.schedulerName: hami-scheduler`   | a scheduler that calls gpupool's extender            |

A pod annotated (or in a namespace labelled) `gpupool.io/adopt-nvidia-gpu: "false"` that asks
only for `nvidia.com/gpu` is left to NVIDIA's device plugin. A pod that uses both kinds of names
is refused (MixedResourceNames), and so is a bad HAMi value, each with a message that names the
HAMi field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.hami_policies import HAMI_POLICY_ANNOTATIONS, policies
from gpupool.adapters.wire import names
from gpupool.adapters.wire.pods import whole_number
from gpupool.domain.errors import InvalidQuantity, InvalidRequest, UnknownGpuModel
from gpupool.domain.models import CATALOGUE
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
MIG_PREFIX = "nvidia.com/mig-"  # NVIDIA's MIG profiles: nvidia.com/mig-1g.10gb, ...
# HAMi's scheduling and mode annotations (v2.10): read on a HAMi pod, mapped or ignored.
ADOPT_NVIDIA_GPU = names.ANN_ADOPT_NVIDIA_GPU

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


class MigNotSupported(InvalidRequest):
    """A pod asks for an NVIDIA MIG profile, which gpupool does not hand out."""


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


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _asks(pod: Mapping[str, Any], resources: Sequence[str]) -> bool:
    return any(
        r in _listed(c)
        for key in ("containers", "initContainers")
        for c in _containers(pod, key)
        for r in resources
    )


def is_hami_pod(pod: Mapping[str, Any], adopt_nvidia_gpu: bool = False) -> bool:
    """True when the pod asks for a HAMi-only resource or carries a HAMi annotation, or (with
    `adopt_nvidia_gpu`) asks for `nvidia.com/gpu`."""
    if any(a in _annotations(pod) for a in HAMI_ANNOTATIONS):
        return True
    return _asks(pod, (*HAMI_RESOURCES, GPU) if adopt_nvidia_gpu else HAMI_RESOURCES)


def adopts_nvidia_gpu(value: object | None, where: str) -> bool:
    """False when `value` (the pod's annotation or its namespace's label
    `gpupool.io/adopt-nvidia-gpu`) says "false"; True when absent or "true"."""
    if value is None:
        return True
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidRequest(
            f'{where} {ADOPT_NVIDIA_GPU} must be "true" or "false" ("false" leaves a pod that '
            f"asks only for {GPU} to NVIDIA's device plugin); got {str(value)!r}"
        )
    return text == "true"


def _mig_resources(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, resource) for every MIG profile a container or init container asks for."""
    found: list[tuple[str, str]] = []
    for key, kind in (("containers", "container"), ("initContainers", "initContainer")):
        for c in _containers(pod, key):
            where = f"{kind} {c.get('name', '?')!r}"
            found.extend((where, r) for r in _listed(c) if str(r).startswith(MIG_PREFIX))
    return found


def check_no_mig(pod: Mapping[str, Any]) -> None:
    """MigNotSupported for a pod asking for an NVIDIA MIG profile."""
    mig = _mig_resources(pod)
    if mig:
        where, resource = mig[0]
        raise MigNotSupported(
            f"{where} asks for {resource}, an NVIDIA MIG instance; gpupool does not partition "
            f"cards with MIG yet: ask for a slice of that size instead ({names.RES_GPU_MEMORY}: "
            f"10Gi, or HAMi's {GPUMEM}: 10240), which gpupool's limiter caps, or run the pod "
            f"where NVIDIA's device plugin serves MIG (a namespace the gpupool webhook skips, or "
            f'with the pod annotation {ADOPT_NVIDIA_GPU}: "false")'
        )


def _marks(
    pod: Mapping[str, Any], annotation_names: tuple[str, ...], resource_names: tuple[str, ...]
) -> list[str]:
    """The names of `annotation_names` the pod carries, then of `resource_names` it asks for."""
    annotations = _annotations(pod)
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


def _match(annotation: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the models a HAMi type list names, the listed names no model matches)."""
    parts = [p.strip() for p in text.replace("|", ",").split(",") if p.strip()]
    if not parts:
        raise InvalidRequest(f"annotation {annotation} lists no GPU type; remove it or name one")
    found: dict[str, None] = {}
    unknown: list[str] = []
    for part in parts:
        key = _key(part)
        exact = [m for m in CATALOGUE if _key(m.name) == key]
        hits = exact or [m for m in CATALOGUE if any(key in _key(n) for n in (m.name, *m.aliases))]
        if not hits:
            unknown.append(part)
        found.update(dict.fromkeys(m.name for m in hits))
    return tuple(found), tuple(unknown)


def match_models(annotation: str, text: str) -> tuple[str, ...]:
    """The models a HAMi type list (`A100,V100`) names: a name matches the models whose name or
    alias contains it (HAMi matches the card's type so: `A100` is every A100), except a gpupool
    model's exact name, which matches only that model (`A10` is the A10, not the A100s).
    UnknownGpuModel for a name no model matches."""
    models, unknown = _match(annotation, text)
    if unknown:
        known = ", ".join(m.name for m in CATALOGUE if m.known)
        raise UnknownGpuModel(
            f"annotation {annotation}: no GPU model gpupool knows matches {unknown[0]!r}; "
            f"known models: {known}"
        )
    return models


def _allowed_models(annotations: Mapping[str, str], warnings: list[str]) -> tuple[str, ...]:
    """gpupool's `gpu-model` for the HAMi type annotations; () when they restrict nothing (not
    set, or `nouse-gputype` naming only models gpupool does not know: no card it serves is one
    of them, so the list cannot be broken)."""
    use = annotations.get(USE_GPUTYPE)
    nouse = annotations.get(NOUSE_GPUTYPE)
    if use is None and nouse is None:
        return ()
    allowed = match_models(USE_GPUTYPE, str(use)) if use is not None else ()
    if nouse is None:
        return allowed
    banned, unknown = _match(NOUSE_GPUTYPE, str(nouse))
    if unknown:
        warnings.append(
            f"HAMi's annotation {NOUSE_GPUTYPE}: {', '.join(repr(u) for u in unknown)} "
            f"{'matches' if len(unknown) == 1 else 'match'} no GPU model gpupool knows, so no "
            f"card gpupool serves is one: ignored"
        )
    if not banned:
        return allowed
    if use is None:
        allowed = tuple(m.name for m in CATALOGUE if m.known)
    left = tuple(m for m in allowed if m not in set(banned))
    if not left:
        raise InvalidRequest(
            f"annotation {NOUSE_GPUTYPE} ({nouse}) excludes every GPU type "
            f"{USE_GPUTYPE if use is not None else 'gpupool knows'} allows; the pod could "
            f"never be placed"
        )
    return left


def _card_size(
    percent: int, models: tuple[str, ...], cards: Sequence[Card], where: str
) -> tuple[str, str]:
    """`percent` of a card, as a gpu-memory quantity and what it is a share of, on every card
    the pod may land on: HAMi's share of the card's whole memory, capped at what the node
    offers. They must agree: gpupool reserves a fixed amount."""
    fitting = [c for c in cards if not models or c.model in models]
    source = "on the cluster's GpuNodes"
    if not fitting and models:
        fitting = [c for c in map(Card.from_catalogue, models) if c is not None]
        source = "in gpupool's catalogue (no GpuNode reports one yet)"
    scope = f"the {'|'.join(models)} cards" if models else "the cards"
    ask = f"ask for {GPUMEM} (MiB per card) instead, or name one card size with {USE_GPUTYPE}"
    if not fitting:
        raise InvalidRequest(
            f"{where}: {GPUMEM_PERCENTAGE}: {percent} is a share of the card the pod lands on, "
            f"and no GpuNode reports a card yet to tell its size; {ask}"
        )
    sizes = {c.share(percent) for c in fitting}
    if len(sizes) == 1:
        card = fitting[0]
        said = f"{percent}% of the card's {format_bytes(card.whole_bytes)}"
        if card.capped(percent):
            said += f", capped at the {format_bytes(card.allocatable_bytes)} it offers"
        return format_quantity(card.share(percent)), said
    listing = ", ".join(format_bytes(s) for s in sorted({c.whole_bytes for c in fitting}))
    shares = ", ".join(format_bytes(s) for s in sorted(sizes))
    raise InvalidRequest(
        f"{where}: {GPUMEM_PERCENTAGE}: {percent} is a share of the card the pod lands on, and "
        f"{scope} it may land on differ in size ({listing} {source}; {percent}% is {shares}), "
        f"while gpupool reserves a fixed amount; {ask}"
    )


def _translate_container(
    container: Mapping[str, Any],
    models: tuple[str, ...],
    cards: Sequence[Card],
    warnings: list[str],
    who: str,
) -> dict[str, Any]:
    """The container with HAMi's resources replaced by gpupool's (limits and requests alike).
    `who` names whose names they are in the warnings (HAMi's; NVIDIA's for a pod that asks
    only for nvidia.com/gpu)."""
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
    whole = raw_mem is None and (raw_pct is None or str(raw_pct).strip() == "100")
    cards_said = "a whole card" if count == 1 else "whole cards"
    said = [f"{asked} → {names.RES_GPU}: {count}" + (f" ({cards_said})" if whole else "")]
    each = f" on each of {count} cards" if count > 1 else ""
    if raw_mem is not None:
        mib = _mebibytes(raw_mem, where)
        out[names.RES_GPU_MEMORY] = format_quantity(mib * MiB)
        said.append(f"{GPUMEM}: {mib} → {names.RES_GPU_MEMORY}: {out[names.RES_GPU_MEMORY]}{each}")
    if raw_pct is not None:
        pct = whole_number(raw_pct, GPUMEM_PERCENTAGE, 1, 100, "50", f"{where}: ")
        if pct == 100:
            said.append(f"{GPUMEM_PERCENTAGE}: 100 → {cards_said}")
        else:
            size, why = _card_size(pct, models, cards, where)
            out[names.RES_GPU_MEMORY] = size
            said.append(
                f"{GPUMEM_PERCENTAGE}: {pct} → {names.RES_GPU_MEMORY}: {size}{each} ({why})"
            )
    if raw_cores is not None:
        cores = whole_number(raw_cores, GPUCORES, 0, 100, "30", f"{where}: ")
        if cores:
            out[names.RES_GPU_COMPUTE] = str(cores)
            said.append(f"{GPUCORES}: {cores} → {names.RES_GPU_COMPUTE}: {cores}")
        else:
            said.append(f"{GPUCORES}: 0 → no compute cap (HAMi's meaning of 0)")
    warnings.extend(f"{where}: {who} {line}" for line in said)
    resources: dict[str, Any] = copy.deepcopy(dict(container.get("resources") or {}))
    for part in ("limits", "requests"):
        kept = {k: v for k, v in dict(resources.get(part) or {}).items() if k not in _ALL_RESOURCES}
        resources[part] = {**kept, **out} if part == "limits" else kept
    return {**container, "resources": resources}


def _uses_gpupool_names(pod: Mapping[str, Any]) -> bool:
    return bool(_marks(pod, names.USER_ANNOTATIONS, _GPUPOOL_RESOURCES))


def translate(
    pod: Mapping[str, Any],
    cards: Sequence[Card],
    scheduler: str,
    adopt_nvidia_gpu: bool = True,
) -> Translation:
    """The pod in gpupool's names; unchanged (no warnings) unless it is a HAMi pod. `cards` size
    `gpumem-percentage`; `scheduler` (one that calls gpupool's extender) replaces HAMi's;
    `adopt_nvidia_gpu` (the webhook's setting and the namespace's label) makes a pod asking for
    `nvidia.com/gpu` a HAMi pod unless the pod's own annotation says "false". Raises
    MixedResourceNames for a pod that uses both kinds, MigNotSupported for a MIG profile,
    InvalidRequest/InvalidQuantity/UnknownGpuModel for a bad HAMi value."""
    adopt = adopt_nvidia_gpu and adopts_nvidia_gpu(
        _annotations(pod).get(ADOPT_NVIDIA_GPU), "the pod's annotation"
    )
    if _mig_resources(pod) and (adopt or is_hami_pod(pod) or _uses_gpupool_names(pod)):
        check_no_mig(pod)
    check_not_mixed(pod)
    if not is_hami_pod(pod, adopt):
        if not _uses_gpupool_names(pod):
            return Translation(pod)
        unread = sorted(a for a in _annotations(pod) if a in HAMI_POLICY_ANNOTATIONS)
        return Translation(
            pod,
            tuple(
                f"HAMi's annotation {a} is not read on a pod that asks in gpupool's names "
                f"({names.ANN_PLACEMENT_POLICY} chooses its placement policy)"
                for a in unread
            ),
        )
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
    warnings: list[str] = []
    models = _allowed_models(annotations, warnings)
    gpu_containers = [
        i
        for i, c in enumerate(_containers(pod, "containers"))
        if set(_listed(c)) & set(_ALL_RESOURCES)
    ]
    if not gpu_containers:
        hami = sorted(a for a in annotations if a in (*HAMI_ANNOTATIONS, *HAMI_POLICY_ANNOTATIONS))
        return Translation(
            pod, (f"annotations {', '.join(hami)} have no effect: the pod asks for no GPU",)
        )
    nvidia_only = not is_hami_pod(pod) and not any(
        a in annotations for a in HAMI_POLICY_ANNOTATIONS
    )
    who = "NVIDIA's" if nvidia_only else "HAMi's"
    translated: list[str] = []
    containers = list(spec.get("containers") or [])
    for i in gpu_containers:
        containers[i] = _translate_container(containers[i], models, cards, translated, who)
    warnings[:0] = translated
    if nvidia_only:
        warnings.append(
            f"gpupool serves pods that ask for {GPU}: whole cards, gated, leased and counted in "
            f"the tenant's quota like any gpupool pod; to leave such a pod to NVIDIA's device "
            f'plugin, annotate it {ADOPT_NVIDIA_GPU}: "false" (or label its namespace so)'
        )
    spec["containers"] = containers
    if spec.get("schedulerName") == HAMI_SCHEDULER:
        spec["schedulerName"] = scheduler
        warnings.append(f"HAMi's spec.schedulerName: {HAMI_SCHEDULER} → {scheduler}")
    for name in (USE_GPUTYPE, NOUSE_GPUTYPE):
        value = annotations.pop(name, None)
        if value is not None:
            became = (
                f"{names.ANN_GPU_MODEL}: {'|'.join(models)}"
                if models
                else f"no {names.ANN_GPU_MODEL} (nothing to keep off)"
            )
            warnings.append(f"HAMi's annotation {name}: {value} → {became}")
    if models:
        annotations[names.ANN_GPU_MODEL] = "|".join(models)
    annotations.update(policies(annotations, warnings))
    meta["annotations"] = annotations
    return Translation({**pod, "metadata": meta, "spec": spec}, tuple(warnings))
