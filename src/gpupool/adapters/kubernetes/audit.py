"""The allocation invariants of DESIGN.md section 9, checked over what the API server holds.

`audit` is pure (pods, GpuLeases and GpuNodes as the API returns them, in any order);
`read_cluster` fetches them with any `get(path) -> JSON` callable (the dev cluster's `KubeApi.get`,
a test's client). What counts as a violation:

- `overcommit`: a card's live leases (phase Reserved, Bound or Active) add up to more memory than
  the card has (its GpuNode's `allocatableBytes`, else `memoryBytes`; unchecked without a GpuNode)
  or more than 100% compute: a double booking;
- `offset-overlap`: two extents of live leases on one card share a byte (a slice's layout is its
  `extents`, or the one range `offsetBytes`/`sizeBytes` for a lease written before extents).
  The extender's bind lays each slice out in the free ranges its node's live leases leave
  (several extents when no one range is long enough), so this is a bug: two binds that raced past
  the lease checks, or a lease written by hand;
- `offset-beyond-card`: an extent of a live lease reaches past its card's memory (as for
  `overcommit`; unchecked without a GpuNode);
- `lease-without-pod`: a live lease whose pod (by uid) is gone or has finished;
- `lease-wrong-node`: a live lease on another node than the one its pod is bound to;
- `reserved-unbound`: a live lease whose pod is not bound to any node (normal for the instant
  between the reservation and the Binding; after convergence it is capacity held by nobody);
- `pod-without-lease`: a pod bound to a node, asking for gpupool GPUs, not finished, without a live
  lease;
- `annotation-mismatch`: a bound pod's `gpupool.io/allocation` differs from its lease's devices;
- `card-reserved-differs`: a card's reserved memory as the bound pods' allocation annotations say
  differs from the sum of its live leases;
- `charge-mismatch`: a live lease's `amount` is not what its slices hold in its `resource`
  (`quota.resource.charge_problem`: bytes, or milli-GPU of each card as its GpuNode sizes it for
  slices), so its tenant is charged for more or less than it holds; unchecked when a card of the
  lease has no GpuNode (the controller's auditor judges the same way, `leases.charge_audit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.pod import slices_from_annotation
from gpupool.adapters.wire.names import (
    ANN_ALLOCATION,
    API_VERSION,
    RES_GPU,
    RES_GPU_MEMORY,
    RES_VGPU,
)
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import MILLI
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT, allocatable_bytes
from gpupool.quota.resource import Resource, charge_problem
from gpupool.state.lease import LeaseRecord

GPU_RESOURCES = (RES_VGPU, RES_GPU_MEMORY, RES_GPU)
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


def _card_sizes(gpunodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Card uuid -> the bytes it offers slices, as placement and bind size it (the GpuNode
    reader's figure: `allocatableBytes`, else `memoryBytes` less the node's reserve)."""
    out: dict[str, int] = {}
    for obj in gpunodes:
        status = obj.get("status") or {}
        reserve = float(status.get("reservePercent", DEFAULT_RESERVE_PCT))
        for d in status.get("devices") or []:
            usable, total = d.get("allocatableBytes"), d.get("memoryBytes")
            size = int(usable) if usable else allocatable_bytes(int(total), reserve) if total else 0
            if size > 0 and d.get("uuid"):
                out[str(d["uuid"])] = size
    return out


def _charge_violation(lease: LeaseRecord, sizes: Mapping[str, int]) -> Violation | None:
    if not all(s.uuid in sizes for s in lease.slices):
        return None
    try:
        resource = Resource.parse(lease.resource)
    except GpupoolError as err:
        return Violation("charge-mismatch", lease.key, str(err))
    problem = charge_problem(lease.amount, lease.slices, resource, sizes)
    return None if problem is None else Violation("charge-mismatch", lease.key, problem)


def audit(
    pods: Iterable[Mapping[str, Any]],
    leases: Iterable[Mapping[str, Any]],
    gpunodes: Iterable[Mapping[str, Any]] = (),
) -> Audit:
    result = Audit()
    bad = result.violations
    gpunodes = list(gpunodes)
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

    # per card: the extents and compute of live leases
    per_card: dict[Card, list[tuple[int, int, str]]] = {}
    compute_of: dict[Card, int] = {}
    for lease in live:
        if lease.pod.uid in lease_of_pod:
            bad.append(
                Violation("two-leases", lease.key, f"pod {lease.pod.uid} also holds "
                          f"{lease_of_pod[lease.pod.uid].key}")
            )  # fmt: skip
        lease_of_pod[lease.pod.uid] = lease
        for s in lease.slices:
            card = (lease.node, s.uuid)
            per_card.setdefault(card, []).extend(
                (offset, offset + size, lease.key) for offset, size in s.ranges
            )
            compute_of[card] = compute_of.get(card, 0) + s.compute_milli
            result.leased[card] = result.leased.get(card, 0) + s.size_bytes
    for card, ranges in sorted(per_card.items()):
        where = f"{card[0]}/{card[1]}"
        ranges.sort()
        # sorted by start, two ranges overlap iff one starts before the furthest end so far
        reach: tuple[int, int, str] | None = None
        for r in ranges:
            if reach is not None and r[0] < reach[1]:
                bad.append(
                    Violation("offset-overlap", where,
                              f"{reach[2]} [{reach[0]}, {reach[1]}) and {r[2]} [{r[0]}, {r[1]})")
                )  # fmt: skip
            if reach is None or r[1] > reach[1]:
                reach = r
        if card in capacity and ranges and max(r[1] for r in ranges) > capacity[card]:
            last = max(ranges, key=lambda r: r[1])
            bad.append(
                Violation("offset-beyond-card", where,
                          f"{last[2]} [{last[0]}, {last[1]}) is past the card's "
                          f"{capacity[card]} bytes")
            )  # fmt: skip
        used = result.leased[card]
        if card in capacity and used > capacity[card]:
            bad.append(
                Violation("overcommit", f"{card[0]}/{card[1]}",
                          f"leases hold {used} bytes of {capacity[card]}")
            )  # fmt: skip
        compute = compute_of[card]
        if compute > MILLI:
            bad.append(
                Violation("overcommit", f"{card[0]}/{card[1]}", f"{compute // 10}% compute leased")
            )

    # each live lease: charged what it holds
    sizes = _card_sizes(gpunodes)
    for lease in live:
        charge = _charge_violation(lease, sizes)
        if charge is not None:
            bad.append(charge)

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


LEASES = f"/apis/{API_VERSION}/gpuleases"
GPUNODES = f"/apis/{API_VERSION}/gpunodes"


def read_cluster(get: Callable[[str], Any], namespace: str | None = None) -> Audit:
    """Audit the cluster (or one namespace's pods and leases) as `get` reads it now.

    Leases are listed before pods: a pod created between the two reads is harmless, while a
    lease created after the pod list could name a pod the audit never saw."""
    if namespace is None:
        leases, pods = LEASES, "/api/v1/pods"
    else:
        leases = f"/apis/{API_VERSION}/namespaces/{namespace}/gpuleases"
        pods = f"/api/v1/namespaces/{namespace}/pods"
    lease_items = get(leases)["items"]
    gpunode_items = get(GPUNODES)["items"]
    pod_items = get(pods)["items"]
    return audit(pod_items, lease_items, gpunode_items)
