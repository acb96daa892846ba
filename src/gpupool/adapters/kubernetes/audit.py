"""The allocation invariants of DESIGN.md section 9, checked over what the API server holds.

`audit` is pure (pods, GpuLeases and GpuNodes as the API returns them, in any order);
`read_cluster` fetches them with any `get(path) -> JSON` callable (the dev cluster's `KubeApi.get`,
a test's client). What counts as a violation:

- `overcommit`: a card's live leases (phase Reserved, Bound or Active) add up to more memory than
  the card has (its GpuNode's `allocatableBytes`, else `memoryBytes`; unchecked without a GpuNode)
  or more than 100% compute: a double booking;
- `offset-overlap`: two live leases' logical ranges (`offsetBytes`, `sizeBytes`) on one card
  overlap. Memory on a card is fungible (DESIGN.md section 5: the limiter caps bytes, not
  addresses), so without `overcommit` this is no double booking, but the published layout is
  wrong (the extender's bind takes the planner's bump-pointer offset when no free range is long
  enough on a card that leases have fragmented);
- `lease-without-pod`: a live lease whose pod (by uid) is gone or has finished;
- `lease-wrong-node`: a live lease on another node than the one its pod is bound to;
- `reserved-unbound`: a live lease whose pod is not bound to any node (normal for the instant
  between the reservation and the Binding; after convergence it is capacity held by nobody);
- `pod-without-lease`: a pod bound to a node, asking for gpupool GPUs, not finished, without a live
  lease;
- `annotation-mismatch`: a bound pod's `gpupool.io/allocation` differs from its lease's devices;
- `card-reserved-differs`: a card's reserved memory as the bound pods' allocation annotations say
  differs from the sum of its live leases.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.kubernetes import ANN_ALLOCATION
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import LeaseRecord, lease_from_json
from gpupool.adapters.kubernetes.pod import slices_from_annotation
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import MILLI

GPU_RESOURCES = ("gpupool.io/vgpu", "gpupool.io/gpu-memory", "gpupool.io/gpu")
TERMINAL = ("Succeeded", "Failed")

Card = tuple[str, str]  # (node, GPU uuid)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    subject: str  # the lease, pod or card it is about
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}: {self.detail}"


@dataclass
class Audit:
    violations: list[Violation] = field(default_factory=list)
    leased: dict[Card, int] = field(default_factory=dict)  # live lease bytes per card
    annotated: dict[Card, int] = field(default_factory=dict)  # bound pods' annotation bytes
    live_leases: int = 0
    gpu_pods: int = 0  # not finished, asking for gpupool GPUs
    bound_pods: int = 0  # of them bound to a node

    @property
    def ok(self) -> bool:
        return not self.violations

    def of_kind(self, *kinds: str) -> list[Violation]:
        return [v for v in self.violations if v.kind in kinds]

    def __str__(self) -> str:
        head = (
            f"{self.live_leases} live leases, {self.gpu_pods} GPU pods ({self.bound_pods} bound), "
            f"{len(self.leased)} cards leased"
        )
        return "\n".join([head, *(str(v) for v in self.violations)])


def _wants_gpu(pod: Mapping[str, Any]) -> bool:
    for c in (pod.get("spec") or {}).get("containers") or []:
        resources = c.get("resources") or {}
        for part in ("limits", "requests"):
            if any(r in (resources.get(part) or {}) for r in GPU_RESOURCES):
                return True
    return False


def _capacities(gpunodes: Iterable[Mapping[str, Any]]) -> dict[Card, int]:
    out: dict[Card, int] = {}
    for obj in gpunodes:
        node = str((obj.get("metadata") or {}).get("name", ""))
        for d in (obj.get("status") or {}).get("devices") or []:
            size = d.get("allocatableBytes") or d.get("memoryBytes")
            if size is not None and d.get("uuid"):
                out[(node, str(d["uuid"]))] = int(size)
    return out


def audit(
    pods: Iterable[Mapping[str, Any]],
    leases: Iterable[Mapping[str, Any]],
    gpunodes: Iterable[Mapping[str, Any]] = (),
) -> Audit:
    result = Audit()
    bad = result.violations
    capacity = _capacities(gpunodes)
    pods_by_uid: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        uid = (pod.get("metadata") or {}).get("uid")
        if uid:
            pods_by_uid[str(uid)] = pod

    live: list[LeaseRecord] = []
    for obj in leases:
        try:
            lease = lease_from_json(obj)
        except InvalidObject as err:
            bad.append(Violation("malformed-lease", str(obj.get("metadata", {})), str(err)))
            continue
        if lease.holds_capacity:
            live.append(lease)
    result.live_leases = len(live)
    lease_of_pod: dict[str, LeaseRecord] = {}

    # per card: the slices of live leases
    per_card: dict[Card, list[tuple[int, int, int, str]]] = {}
    for lease in live:
        if lease.pod.uid in lease_of_pod:
            bad.append(
                Violation("two-leases", lease.key, f"pod {lease.pod.uid} also holds "
                          f"{lease_of_pod[lease.pod.uid].key}")
            )  # fmt: skip
        lease_of_pod[lease.pod.uid] = lease
        for s in lease.slices:
            card = (lease.node, s.uuid)
            per_card.setdefault(card, []).append(
                (s.offset_bytes, s.offset_bytes + s.size_bytes, s.compute_milli, lease.key)
            )
            result.leased[card] = result.leased.get(card, 0) + s.size_bytes
    for card, ranges in sorted(per_card.items()):
        ranges.sort()
        for a, b in itertools.combinations(ranges, 2):
            if a[0] < b[1] and b[0] < a[1]:
                bad.append(
                    Violation("offset-overlap", f"{card[0]}/{card[1]}",
                              f"{a[3]} [{a[0]}, {a[1]}) and {b[3]} [{b[0]}, {b[1]})")
                )  # fmt: skip
        used = result.leased[card]
        if card in capacity and used > capacity[card]:
            bad.append(
                Violation("overcommit", f"{card[0]}/{card[1]}",
                          f"leases hold {used} bytes of {capacity[card]}")
            )  # fmt: skip
        compute = sum(r[2] for r in ranges)
        if compute > MILLI:
            bad.append(
                Violation("overcommit", f"{card[0]}/{card[1]}", f"{compute // 10}% compute leased")
            )

    # each live lease against its pod
    for lease in live:
        owner = pods_by_uid.get(lease.pod.uid)
        phase = ((owner or {}).get("status") or {}).get("phase")
        if owner is None or phase in TERMINAL:
            why = "is gone" if owner is None else f"is {phase}"
            bad.append(
                Violation("lease-without-pod", lease.key,
                          f"pod {lease.pod.namespace}/{lease.pod.name} ({lease.pod.uid}) {why}")
            )  # fmt: skip
            continue
        bound = (owner.get("spec") or {}).get("nodeName")
        if not bound:
            bad.append(
                Violation("reserved-unbound", lease.key,
                          f"pod {lease.pod.namespace}/{lease.pod.name} is not bound; the lease "
                          f"holds {sum(s.size_bytes for s in lease.slices)} bytes on {lease.node}")
            )  # fmt: skip
        elif bound != lease.node:
            bad.append(
                Violation("lease-wrong-node", lease.key, f"lease on {lease.node}, pod on {bound}")
            )

    # each bound GPU pod against its lease
    for uid, pod in sorted(pods_by_uid.items()):
        if not _wants_gpu(pod) or (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        result.gpu_pods += 1
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        result.bound_pods += 1
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        held = lease_of_pod.get(uid)
        if held is None:
            bad.append(Violation("pod-without-lease", key, f"bound to {node}, uid {uid}"))
        text = (meta.get("annotations") or {}).get(ANN_ALLOCATION)
        if text is None:
            if held is not None:
                bad.append(Violation("annotation-mismatch", key, "no allocation annotation"))
            continue
        try:
            slices = slices_from_annotation(str(text), who=key)
        except GpupoolError as err:
            bad.append(Violation("annotation-mismatch", key, str(err)))
            continue
        for s in slices:
            card = (str(node), s.uuid)
            result.annotated[card] = result.annotated.get(card, 0) + s.size_bytes
        if held is not None and set(slices) != set(held.slices):
            bad.append(
                Violation("annotation-mismatch", key,
                          f"annotation {slices} but lease {held.key} holds {held.slices}")
            )  # fmt: skip

    for card in sorted(set(result.leased) | set(result.annotated)):
        leased, annotated = result.leased.get(card, 0), result.annotated.get(card, 0)
        if leased != annotated:
            bad.append(
                Violation("card-reserved-differs", f"{card[0]}/{card[1]}",
                          f"bound pods' annotations say {annotated} bytes, live leases {leased}")
            )  # fmt: skip
    return result


LEASES = "/apis/gpupool.io/v1alpha1/gpuleases"
GPUNODES = "/apis/gpupool.io/v1alpha1/gpunodes"


def read_cluster(get: Callable[[str], Any], namespace: str | None = None) -> Audit:
    """Audit the cluster (or one namespace's pods and leases) as `get` reads it now.

    Leases are listed before pods: a pod created between the two reads is harmless, while a
    lease created after the pod list could name a pod the audit never saw."""
    if namespace is None:
        leases, pods = LEASES, "/api/v1/pods"
    else:
        leases = f"/apis/gpupool.io/v1alpha1/namespaces/{namespace}/gpuleases"
        pods = f"/api/v1/namespaces/{namespace}/pods"
    lease_items = get(leases)["items"]
    gpunode_items = get(GPUNODES)["items"]
    pod_items = get(pods)["items"]
    return audit(pod_items, lease_items, gpunode_items)
