"""Leases reconciled against pods, pure: which bound GPU pods hold cards without a GpuLease, and
what to do about each; and which hold cards they were never admitted for.

A GpuLease is the record of who holds which bytes of a card. If one is deleted while its pod
still runs (an operator's `kubectl delete gl`, a bad script), nothing else remembers those bytes
and the extender would hand them to the next pod. So for every pod bound to a node, asking for
gpupool GPUs, not finished, with no GpuLease of its uid in any phase:

- its `gpupool.io/allocation` (written by the bind together with the Binding, and only gpupool's
  identities may write it) names the slices it holds: the lease is made again from it
  (`Restore`), charged what its slices hold in its `gpupool.io/admitted` record's resource, as
  the bind would;
- the annotation is missing or unreadable, or its slices overlap the live leases of other pods
  (or of another restored pod) on the same card: it cannot be trusted, so nothing is restored
  from it; the pod is reported and fenced (`Fence`: deleted, since it holds bytes no record
  protects and no other pod may be placed on safely).

A pod with a lease in any phase is not a candidate: a lease ended while its pod runs is the
lifecycle's business (expiry, loss), and the lease name (the pod uid) stays taken until it is
collected. A lease made again starts Reserved; the lease plan moves it to Bound and Active.

Separately, `unadmitted` lists the bound GPU pods without a `gpupool.io/admitted` record: they
hold capacity the admission queue never granted (the gate was removed by someone else, or the pod
was bound around the extender). They are reported, not stopped: the admission policy is the fence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.allocations import Slice
from gpupool.state.lease import LeaseRecord
from gpupool.state.pod_hold import held_by
from gpupool.state.pods import PodView

Card = tuple[str, str]  # (node, card uuid)
Range = tuple[int, int]  # [start, end) bytes


@dataclass(frozen=True, slots=True)
class Restore:
    """Create `lease` again: its pod holds these slices by its allocation annotation."""

    pod: PodView
    lease: LeaseRecord

    @property
    def message(self) -> str:
        cards = ", ".join(f"GPU {s.gpu_index} ({s.uuid})" for s in self.lease.slices)
        return (
            f"GpuLease {self.lease.key} of running pod {self.pod.key} was gone; made again from "
            f"its gpupool.io/allocation ({cards} on {self.lease.node})"
        )


@dataclass(frozen=True, slots=True)
class Fence:
    """The pod holds cards without a lease and its allocation cannot be trusted: stop it."""

    pod: PodView
    why: str

    @property
    def message(self) -> str:
        return (
            f"pod {self.pod.key} on {self.pod.node} holds gpupool GPUs without a GpuLease and its "
            f"allocation cannot be restored: {self.why}; it is deleted so that no other pod is "
            f"placed on bytes it may be using"
        )


@dataclass(frozen=True, slots=True)
class RestorePlan:
    restore: tuple[Restore, ...] = ()
    fence: tuple[Fence, ...] = ()
    unadmitted: tuple[PodView, ...] = ()


def _ranges(node: str, slices: Iterable[Slice]) -> dict[Card, list[Range]]:
    out: dict[Card, list[Range]] = {}
    for s in slices:
        out.setdefault((node, s.uuid), []).extend((o, o + n) for o, n in s.ranges)
    return out


def _overlap(taken: dict[Card, list[Range]], wanted: dict[Card, list[Range]]) -> Card | None:
    for card, ranges in wanted.items():
        for start, end in ranges:
            if any(start < e and s < end for s, e in taken.get(card, ())):
                return card
    return None


def _holds_cards(pod: PodView) -> bool:
    return pod.node is not None and pod.request is not None and not pod.terminal


# The extender creates a pod's GpuLease just after its Binding, in the background (retried for
# about 6 s): a pod bound this recently without one is not yet a pod that lost its lease.
RESTORE_GRACE_S = 30.0


def lease_awaited(pod: PodView, has_lease: bool, now: float) -> float | None:
    """When a bound GPU pod without a lease stops waiting for it from the extender and is
    restored or fenced (None: it has a lease, holds no cards, or waits no more)."""
    if has_lease or not _holds_cards(pod) or pod.bound_at is None:
        return None
    at = pod.bound_at + RESTORE_GRACE_S
    return at if at > now else None


def plan_restores(
    leases: Sequence[LeaseRecord],
    pods: Iterable[PodView],
    card_bytes: Mapping[str, int] | None = None,
    now: float | None = None,
) -> RestorePlan:
    """What to restore, fence and report this round (see the module docstring); `card_bytes`
    (card uuid -> bytes it offers slices) charges a restored lease what it holds in milli-GPU.
    With `now`, a pod bound less than RESTORE_GRACE_S ago without a lease waits a round (its
    lease is on its way from the extender); a pod with no known bind time does not wait."""
    has_lease = {lease.pod.uid for lease in leases}
    taken: dict[Card, list[Range]] = {}
    for lease in leases:
        if lease.holds_capacity:
            for card, ranges in _ranges(lease.node, lease.slices).items():
                taken.setdefault(card, []).extend(ranges)
    restore: list[Restore] = []
    fence: list[Fence] = []
    unadmitted: list[PodView] = []
    for pod in sorted(pods, key=lambda p: (p.submitted_at, p.key)):
        if not _holds_cards(pod):
            continue
        assert pod.node is not None
        if pod.admitted is None:
            unadmitted.append(pod)
        if pod.uid in has_lease:
            continue
        if now is not None and pod.bound_at is not None and now - pod.bound_at < RESTORE_GRACE_S:
            continue
        if pod.allocation_problem is not None:
            fence.append(Fence(pod, pod.allocation_problem))
            continue
        if not pod.allocation:
            fence.append(Fence(pod, "it has no gpupool.io/allocation annotation"))
            continue
        wanted = _ranges(pod.node, pod.allocation)
        clash = _overlap(taken, wanted)
        if clash is not None:
            fence.append(
                Fence(pod, f"its allocation overlaps a live lease on card {clash[1]} of {clash[0]}")
            )
            continue
        made = held_by(pod, card_bytes)
        assert made is not None  # bound, a GPU pod, not finished, with an allocation
        for card, ranges in wanted.items():
            taken.setdefault(card, []).extend(ranges)
        restore.append(Restore(pod, made))
    return RestorePlan(tuple(restore), tuple(fence), tuple(unadmitted))
