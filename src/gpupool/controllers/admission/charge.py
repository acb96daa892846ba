"""What the admission queue counts an admitted pod for, pure: a pod is charged for what it holds.

Once bound, its GpuLease's amount (the bind writes what the slices hold on their cards,
`quota.resource.held_amount`, and refuses a holding above what was admitted; `mark_borrowed`
carries it, with the lease's borrowed mark); before that, the most it may take. A quota in GPU
memory counts a whole GPU (`gpupool.io/gpu: 1`, or a compute-only request, which takes a whole
card) or a share as the largest card of the cluster it may land on (`card_sizes`, what the
nodes' cards offer slices); a quota in milli-GPU counts a slice of bytes against the smallest
card that takes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from operator import is_

from gpupool.domain.devices import Gpu
from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import get_model
from gpupool.domain.requests import MILLI, Request
from gpupool.quota.lease import Lease
from gpupool.quota.resource import Resource, demand_of
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView


def _marked(pod: PodView, lease: LeaseRecord | None) -> PodView:
    """The pod with its live lease's borrowed mark and amount (itself when they agree)."""
    if lease is None or pod.admitted is None:
        return pod
    held = (max(0, lease.borrowed), lease.preemptible, lease.resource, max(0, lease.amount))
    record = pod.admitted
    if (record.borrowed, record.preemptible, record.resource, record.amount) == held:
        return pod
    admitted = replace(
        record, borrowed=held[0], preemptible=held[1], resource=held[2], amount=held[3]
    )
    return replace(pod, admitted=admitted)


class BorrowedMarks:
    """`mark_borrowed`'s views kept from one round to the next while a pod's view and its live
    lease are the same objects (the watch cache's readers hand the same decoded object for an
    unchanged resourceVersion), with the uid -> live lease map kept while the leases are: the
    record of a bound pod often differs from its lease (a whole-card pod is admitted at the most
    it may take, its lease says what its cards hold), and a copy made for every admitted pod
    each round was a fifth of an admission round's own CPU in a fill. A special case of
    `controllers.kept.Kept`, written out: at 7,500 pods its generic lookup per pod (a tuple, a
    partial, a comparison of each) was a third of a round."""

    def __init__(self) -> None:
        self._leases: list[LeaseRecord] = []
        self._live: dict[str, LeaseRecord] = {}
        # pod uid -> (its view, its live lease, the marked view) of the last round
        self._last: dict[str, tuple[PodView, LeaseRecord | None, PodView]] = {}

    def marked(self, pods: Iterable[PodView], leases: Sequence[LeaseRecord]) -> list[PodView]:
        if not _same_objects(leases, self._leases):
            self._leases = list(leases)
            self._live = _live_by_pod(leases)
        live, last = self._live, self._last
        this: dict[str, tuple[PodView, LeaseRecord | None, PodView]] = {}
        out = []
        for pod in pods:
            uid = pod.uid
            lease = live.get(uid)
            was = last.get(uid)
            if was is not None and was[0] is pod and was[1] is lease:
                value = was[2]
            else:
                value = _marked(pod, lease)
            if uid:
                this[uid] = (pod, lease, value)
            out.append(value)
        self._last = this  # a pod not seen this round is forgotten (it is gone)
        return out


def _same_objects(these: Sequence[object], those: Sequence[object]) -> bool:
    return len(these) == len(those) and all(map(is_, these, those))


def _live_by_pod(leases: Iterable[LeaseRecord]) -> dict[str, LeaseRecord]:
    return {le.pod.uid: le for le in leases if le.holds_capacity}


def mark_borrowed(
    pods: Iterable[PodView], leases: Sequence[LeaseRecord], kept: BorrowedMarks | None = None
) -> list[PodView]:
    """The pods, each admitted one with its borrowed mark and its amount (what it holds, in its
    quota's resource) taken from its live GpuLease; `kept`: the last round's, given back for the
    pods whose view and lease did not change (`BorrowedMarks`)."""
    if kept is not None:
        return kept.marked(pods, leases)
    live = _live_by_pod(leases)
    return [_marked(pod, live.get(pod.uid)) for pod in pods]


def card_sizes_of(gpus: Iterable[Gpu]) -> dict[str, int]:
    """GPU model -> the largest card of that model in the cluster (bytes slices may take)."""
    sizes: dict[str, int] = {}
    for gpu in gpus:
        total = gpu.total_memory
        if total is not None:
            sizes[gpu.model] = max(total, sizes.get(gpu.model, 0))
    return sizes


def card_memory(
    pod: PodView, card_sizes: Mapping[str, int], request: Request, resource: Resource
) -> int | None:
    """The card size a share needs to be counted in bytes (or bytes in milli-GPU), if known:
    the card it holds, else of the cards it may land on (the cluster's, else the catalogue's
    for the models it names) the one that counts the most, so that a pod is never charged less
    than it may hold: the largest for a share or a whole card counted in bytes, the smallest
    that takes the slice for bytes counted in milli-GPU."""
    models = pod.allocation_models or request.models
    if not models:
        sizes = set(card_sizes.values())
    else:
        named = {card_sizes.get(m) or get_model(m).memory_bytes for m in models if _known(m)}
        sizes = {s for s in named if s is not None}
    if not sizes:
        return None
    if resource is Resource.GPU and request.gpu_memory_bytes is not None:
        takes = [s for s in sizes if s >= request.gpu_memory_bytes]
        return min(takes or sizes)
    return max(sizes)


def _known(model: str) -> bool:
    try:
        get_model(model)
    except GpupoolError:
        return False
    return True


def held_amount(
    request: Request, resource: Resource, pod: PodView, card_sizes: Mapping[str, int]
) -> int:
    """What an admitted pod holds: its live GpuLease's amount (what its slices hold, written at
    bind; `mark_borrowed` carries it), else what admission counted (`gpupool.io/admitted`),
    else its request counted again; if it cannot be converted, its whole cards."""
    mark = pod.admitted
    if mark is not None and mark.amount is not None and mark.resource == resource.value:
        return mark.amount
    try:
        return demand_of(request, resource, card_memory(pod, card_sizes, request, resource))
    except GpupoolError:
        if resource is Resource.GPU:
            return MILLI * request.gpu_count
        return (request.gpu_memory_bytes or 0) * request.gpu_count


def charged_lease(
    pod: PodView, request: Request, quota: TenantQuota, card_sizes: Mapping[str, int]
) -> Lease:
    admitted = pod.admitted
    return Lease(
        id=pod.uid or pod.key,
        tenant=quota.name,
        amount=held_amount(request, quota.resource, pod, card_sizes),
        reserved_at=admitted.at if admitted else pod.submitted_at,
        priority=pod.priority,
        compute_milli=request.compute_milli * request.gpu_count,
        gpu_memory_bytes=(request.gpu_memory_bytes or 0) * request.gpu_count,
        borrowed=bool(admitted and admitted.borrowed > 0),
        preemptible=bool(admitted and admitted.preemptible),
        exclusive=request.exclusive,
        gang=pod.gang.key if pod.gang else None,
    )


class KeptCharges:
    """The admitted pods' charges (`charged_lease`) kept from one round's plans to the next
    while the pod's view, its quota and the card sizes are the same objects; a charge not asked
    for in a round is forgotten at its end (`pass_done`). A special case of
    `controllers.kept.Kept`, written out as `BorrowedMarks` is: in a one-tenant fill every
    admitted pod's charge is asked for every round, and the generic lookup (a partial, a tuple,
    a comparison of each) was a fifth of the round."""

    def __init__(self) -> None:
        # pod uid (key when it has none) -> (its view, its quota, the card sizes, its charge)
        self._last: dict[str, tuple[PodView, TenantQuota, object, Lease]] = {}
        self._this: dict[str, tuple[PodView, TenantQuota, object, Lease]] = {}

    def charge(
        self,
        pod: PodView,
        request: Request,
        quota: TenantQuota,
        sizes: Mapping[str, int],
        sizes_read: object,
    ) -> Lease:
        """`pod`'s charge; `sizes_read`: the card sizes as read this round (the same object
        while they did not change), `sizes` what the charge is made with."""
        key = pod.uid or pod.key
        was = self._last.get(key)
        if was is not None and was[0] is pod and was[1] is quota and was[2] is sizes_read:
            value = was[3]
        else:
            value = charged_lease(pod, request, quota, sizes)
        self._this[key] = (pod, quota, sizes_read, value)
        return value

    def pass_done(self) -> None:
        """This round's charges are the ones kept for the next."""
        self._last, self._this = self._this, {}
