"""What a bound GPU pod holds by its own annotations, as a GpuLease record (`held_by`).

The extender's bind writes the pod's `gpupool.io/allocation` from the GpuLease it reserved, in
the same write as the Binding; only gpupool's identities may write it. So while a bound pod's
lease is missing (deleted by hand, not yet made again by the controller), its allocation says
which bytes it holds: the controller makes the lease again from it (`controllers.leases.restore`),
and the extender counts it as held until then (the union of leases and bound pods' allocations).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from gpupool.domain.errors import GpupoolError
from gpupool.quota.lease import LeasePhase
from gpupool.quota.resource import Resource, held_amount
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.pods import PodView


def held_by(pod: PodView, card_bytes: Mapping[str, int] | None = None) -> LeaseRecord | None:
    """The lease the bind made for `pod`, as its annotations describe it (named after its uid),
    charged what its slices hold in its admitted record's resource, as the bind charges it
    (`card_bytes`: card uuid -> bytes the card offers slices, needed for milli-GPU; without the
    card's size, the admitted amount); None when it holds nothing readable (not bound, finished,
    asks for no GPU, no or an unreadable allocation)."""
    if pod.node is None or pod.request is None or pod.terminal or not pod.allocation:
        return None
    mark = pod.admitted
    resource, amount = "gpu-memory", sum(s.size_bytes for s in pod.allocation)
    if mark is not None and mark.resource is not None and mark.amount is not None:
        resource, amount = mark.resource, mark.amount
        with contextlib.suppress(GpupoolError):  # a resource gpupool does not know: as admitted
            held = held_amount(pod.allocation, Resource.parse(resource), card_bytes or {})
            amount = amount if held is None else held
    return LeaseRecord(
        name=pod.uid,
        namespace=pod.namespace,
        tenant=pod.tenant,
        pod=PodRef(pod.namespace, pod.name, pod.uid),
        node=pod.node,
        slices=pod.allocation,
        amount=amount,
        resource=resource,
        borrowed=min(mark.borrowed, amount) if mark is not None else 0,
        priority=pod.priority,
        preemptible=bool(mark and mark.preemptible),
        exclusive=pod.request.exclusive,
        phase=LeasePhase.RESERVED,
    )
