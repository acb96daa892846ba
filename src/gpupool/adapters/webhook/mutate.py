"""The mutating decision for a pod being created, pure: validate and normalise its GPU request,
stamp the tenant, add the device-plugin resource and the quota scheduling gate.

`mutate_pod` returns the JSON Patch (RFC 6902) to apply, or raises the typed error whose message
the webhook sends back to the user. A pod that asks for no GPU passes unchanged, unless it
carries annotations only gpupool writes. The annotations are checked here, on create, because
here the webhook can tell its own `queued-at` (which it overwrites on every call, so a user's
value never survives) from a user's; on update the pod-integrity policy (`policy.py`) checks
them, with no webhook needed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.claims import PodClaim, pod_claim_ask
from gpupool.adapters.webhook.gang import GangMember, check_members
from gpupool.adapters.webhook.hami import ADOPT_NVIDIA_GPU, adopts_nvidia_gpu, translate
from gpupool.adapters.wire import names
from gpupool.adapters.wire.claim_request import ClaimAsk, to_annotation
from gpupool.adapters.wire.gangs import read_gang
from gpupool.adapters.wire.json_pointer import pointer
from gpupool.adapters.wire.lease_terms import check_within_tenant, pod_ttl
from gpupool.adapters.wire.pods import PodGpu, gpu_resources, read_pod_gpu
from gpupool.domain.errors import GpupoolError, InvalidGang, InvalidRequest

JsonPatch = list[dict[str, Any]]


DEFAULT_SCHEDULER = "default-scheduler"

# The pod annotation the webhook writes on a pod whose GPU request it translated: JSON
# {"review": <the AdmissionReview's uid>, "lines": [<the warnings>]}. It keeps what was
# translated on the pod, and lets the webhook find the pod it admitted (a pod made from
# generateName has no name at admission) to record the lines as an Event on it (`events.py`).
ANN_TRANSLATED = names.ANN_TRANSLATED


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the webhook knows of the cluster when it admits a pod."""

    # Every card the GpuNodes report; () when unknown. (model, allocatable bytes) pairs are
    # read as Cards whose whole memory is the catalogue's.
    cards: tuple[Card, ...] = ()
    # The schedulerNames whose kube-scheduler calls gpupool's extender.
    schedulers: tuple[str, ...] = (DEFAULT_SCHEDULER,)
    # The pods that already carry the pod's gpupool.io/gang label in its namespace (when it has
    # one): what a new member is checked against (`gang.check_members`).
    gang_members: tuple[GangMember, ...] = ()
    # The webhook's --adopt-nvidia-gpu: pods asking for nvidia.com/gpu are gpupool's (whole
    # cards); a namespace label or pod annotation gpupool.io/adopt-nvidia-gpu: "false" opts out.
    adopt_nvidia_gpu: bool = True
    # The pod's tenant's GpuQuota leaseTTLSeconds (None: unknown or unset): the longest
    # gpupool.io/lease-ttl the pod may ask for.
    tenant_lease_ttl_s: float | None = None
    # The claims the pod names (`spec.resourceClaims`), their specs looked up: a claim on
    # gpu.gpupool.io makes the pod gpupool's (`claims.py`).
    claims: tuple[PodClaim, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cards", tuple(Card.of(c) for c in self.cards))

    def allocatable(self) -> tuple[tuple[str, int], ...]:
        """(model, allocatable bytes) of every card: what bounds a slice."""
        return tuple((c.model, c.allocatable_bytes) for c in self.cards)


UNKNOWN_CLUSTER = ClusterFacts()  # no cards known (the catalogue bounds requests)


@dataclass(frozen=True, slots=True)
class PodMutation:
    patch: JsonPatch
    tenant: str | None  # None: the pod asks for no GPU and passes unchanged
    gpu: PodGpu | None
    warnings: tuple[str, ...] = ()
    # The lines of HAMi's (or NVIDIA's) names translated on a GPU pod: what its Events say.
    translated: tuple[str, ...] = ()
    claim: ClaimAsk | None = None  # what its claim on gpu.gpupool.io asks (a claim pod)


def tenant_of(namespace_labels: Mapping[str, str]) -> str:
    """The tenant a namespace belongs to: its `gpupool.io/tenant` label, else `default`."""
    value = str(namespace_labels.get(names.LABEL_TENANT, "")).strip()
    return value or names.DEFAULT_TENANT


def _canonical_models(annotations: dict[str, str], gpu: PodGpu) -> None:
    request = gpu.request
    for key, value in (
        (names.ANN_GPU_MODEL, request.models),
        (names.ANN_PREFER_GPU_MODEL, request.preferred_models),
        (names.ANN_AVOID_GPU_MODEL, request.avoided_models),
    ):
        if key in annotations:
            annotations[key] = "|".join(value)
    if gpu.compute_mode is not None:
        annotations[names.ANN_COMPUTE_MODE] = gpu.compute_mode
    if gpu.workload is not None:
        annotations[names.ANN_WORKLOAD] = gpu.workload
    if names.ANN_EXCLUSIVE in annotations:
        annotations[names.ANN_EXCLUSIVE] = "true" if request.exclusive else "false"


def _written_by_gpupool(
    annotations: Mapping[str, str], gpu: PodGpu | None, claim: bool = False
) -> None:
    # queued-at on a GPU pod: a reinvocation of this webhook sees its own; it is overwritten
    stamped: tuple[str, ...] = (names.ANN_QUEUED_AT,) if gpu is not None or claim else ()
    stamped += (names.ANN_CLAIM,) if claim else ()
    written = sorted(k for k in annotations if k in names.SYSTEM_ANNOTATIONS and k not in stamped)
    if written:
        raise InvalidRequest(
            f"annotations {', '.join(written)} are written by gpupool; remove them from the pod"
        )


def _check_scheduler(spec: Mapping[str, Any], schedulers: tuple[str, ...]) -> None:
    name = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if name not in schedulers:
        raise InvalidRequest(
            f"the pod asks for GPUs but spec.schedulerName is {name!r}, a scheduler that does "
            f"not place gpupool's GPUs, so the pod would wait forever; set spec.schedulerName "
            f"to {' or '.join(repr(s) for s in schedulers)} (or remove it)"
        )


TIMESLICE_REFUSED = (
    f"annotation {names.ANN_COMPUTE_MODE}: timeslice is not supported: gpupool does not set up "
    f"time-slicing, and a pod without {names.ANN_COMPUTE_MODE} already shares its card by the "
    f"driver's own time-slicing, with its memory slice enforced (but not its "
    f"{names.RES_GPU_COMPUTE}); remove the annotation, or set it to mps to cap the pod's share "
    f"of the card's SMs, or to none to run without MPS whatever the cluster's defaults"
)


def _check_compute_mode(annotations: Mapping[str, str]) -> None:
    """Refuse the compute modes gpupool accepts on a pod but does not carry out."""
    value = annotations.get(names.ANN_COMPUTE_MODE)
    if value is None:
        return
    text = str(value).strip().lower()
    if text == "timeslice":
        raise InvalidRequest(TIMESLICE_REFUSED)
    if text not in ("mps", "none"):
        raise InvalidRequest(
            f'annotation {names.ANN_COMPUTE_MODE} must be "mps" or "none" (or absent: the '
            f"cluster's default for the pod's class and card, docs/compute-modes.md); got "
            f"{value!r}"
        )


def _read_gpu(
    pod: Mapping[str, Any], tenant: str, cluster: ClusterFacts, translated: tuple[str, ...]
) -> PodGpu | None:
    """The pod's GPU request; a refusal of a translated pod says how its HAMi names were read,
    since it names gpupool's."""
    try:
        return read_pod_gpu(pod, tenant=tenant, cluster_cards=cluster.allocatable())
    except GpupoolError as err:
        if not translated:
            raise
        raise type(err)(
            f"{err} (read from the pod's HAMi names: {'; '.join(translated)})"
        ) from None


def mutate_pod(
    pod: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    queued_at: str,
    cluster: ClusterFacts = UNKNOWN_CLUSTER,
    review: str = "",
) -> PodMutation:
    """The patch for a pod being created; `queued_at` is the submit time (RFC 3339) to stamp.
    The pod's shape is already checked (`shape.check_pod`). A pod written in HAMi's names is
    read in gpupool's (`hami.translate`), one warning per name translated, which `review` (the
    AdmissionReview's uid) and the lines are stamped as `ANN_TRANSLATED`."""
    original = pod
    adopt = cluster.adopt_nvidia_gpu and adopts_nvidia_gpu(
        namespace_labels.get(ADOPT_NVIDIA_GPU), "the namespace's label"
    )
    translation = translate(
        pod, cluster.cards, (*cluster.schedulers, DEFAULT_SCHEDULER)[0], adopt_nvidia_gpu=adopt
    )
    pod = translation.pod
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    tenant = tenant_of(namespace_labels)
    _check_compute_mode(annotations)
    ttl = pod_ttl(annotations)  # InvalidLeaseTtl: negative, unreadable or beyond the bound
    if ttl is not None:  # LeaseTtlTooLong: longer than its tenant's leases may live
        check_within_tenant(ttl, tenant, cluster.tenant_lease_ttl_s)
    gpu = _read_gpu(pod, tenant, cluster, translation.warnings)
    namespace = str(meta.get("namespace") or "")
    claim = None if gpu is not None else pod_claim_ask(cluster.claims, cluster.cards, namespace)
    _written_by_gpupool(annotations, gpu, claim is not None)
    gang = read_gang(meta)  # InvalidGang: a size of 0, not a number, over the bound, ...
    if gang is not None and claim is not None:
        raise InvalidGang(
            f"the pod is in gang {gang.name!r} and asks for its GPU with a claim; gpupool does "
            f"not place gangs of claim pods yet: remove {names.LABEL_GANG} and "
            f"{names.ANN_GANG_SIZE}, or ask with {names.RES_GPU_MEMORY}"
        )
    if gang is not None:
        if gpu is None:
            raise InvalidGang(
                f"the pod is in gang {gang.name!r} but asks for no GPU; gpupool admits a gang's "
                f"GPU pods together, so only GPU pods join one: remove {names.LABEL_GANG} and "
                f"{names.ANN_GANG_SIZE}, or give the pod its GPU request"
            )
        check_members(gang, str(meta.get("name") or ""), tenant, cluster.gang_members)
    if claim is not None:
        return _claim_pod(spec, labels_of(meta), annotations, tenant, queued_at, claim, cluster)
    if gpu is None:
        ours = sorted(k for k in annotations if k in names.USER_ANNOTATIONS)
        warnings = (
            (f"annotations {', '.join(ours)} have no effect: the pod asks for no GPU",)
            if ours
            else ()
        )
        return PodMutation([], None, None, translation.warnings + warnings)
    _check_placed_by_gpupool(spec, cluster)

    patch: JsonPatch = []
    labels = labels_of(meta)
    labels[names.LABEL_TENANT] = tenant
    patch.append({"op": "add", "path": "/metadata/labels", "value": labels})

    _canonical_models(annotations, gpu)
    annotations[names.ANN_QUEUED_AT] = queued_at
    if translation.warnings:
        annotations[ANN_TRANSLATED] = json.dumps(
            {"review": review, "lines": list(translation.warnings)}, ensure_ascii=False
        )
    patch.append({"op": "add", "path": "/metadata/annotations", "value": annotations})

    container = spec["containers"][gpu.container]
    resources: dict[str, Any] = copy.deepcopy(dict(container.get("resources") or {}))
    normalised = gpu_resources(gpu)
    for part in ("limits", "requests"):
        values = {
            k: v
            for k, v in dict(resources.get(part) or {}).items()
            if k not in names.USER_RESOURCES
        }
        values.update(normalised)
        resources[part] = values
    patch.append(
        {
            "op": "add",
            "path": pointer("spec", "containers", gpu.container, "resources"),
            "value": resources,
        }
    )

    if spec.get("schedulerName") != (original.get("spec") or {}).get("schedulerName"):
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": spec["schedulerName"]})

    patch.append(_gated(spec))
    return PodMutation(patch, tenant, gpu, translation.warnings, translation.warnings)


def labels_of(meta: Mapping[str, Any]) -> dict[str, str]:
    return dict(meta.get("labels") or {})


def _check_placed_by_gpupool(spec: Mapping[str, Any], cluster: ClusterFacts) -> None:
    _check_scheduler(spec, cluster.schedulers)
    if spec.get("nodeName"):
        raise InvalidRequest(
            f"the pod asks for GPUs but sets spec.nodeName ({spec['nodeName']}); GPU pods must "
            f"go through the scheduler: remove spec.nodeName (use a nodeSelector instead)"
        )


def _gated(spec: Mapping[str, Any]) -> dict[str, Any]:
    gates = list(spec.get("schedulingGates") or [])
    if not any(g.get("name") == names.QUOTA_GATE for g in gates):
        gates.append({"name": names.QUOTA_GATE})
    return {"op": "add", "path": "/spec/schedulingGates", "value": gates}


def _claim_pod(
    spec: Mapping[str, Any],
    labels: dict[str, str],
    annotations: dict[str, str],
    tenant: str,
    queued_at: str,
    claim: ClaimAsk,
    cluster: ClusterFacts,
) -> PodMutation:
    """A claim pod is gpupool's as a GPU pod is: tenant label, queued-at, the quota gate; its
    claim's ask is written on it for the controllers (no extended resource is added)."""
    _check_placed_by_gpupool(spec, cluster)
    labels[names.LABEL_TENANT] = tenant
    annotations[names.ANN_QUEUED_AT] = queued_at
    annotations[names.ANN_CLAIM] = to_annotation(claim)
    patch: JsonPatch = [
        {"op": "add", "path": "/metadata/labels", "value": labels},
        {"op": "add", "path": "/metadata/annotations", "value": annotations},
        _gated(spec),
    ]
    return PodMutation(patch, tenant, None, claim=claim)
