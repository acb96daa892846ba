"""Whether planned slices fit beside the leases just listed on a node, and where their bytes go
(pure). Bind plans against the cache's snapshot; these re-check the plan against the API server's
consistent list of the node's leases, so a stale cache can never double-book a card.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.domain.allocations import MAX_EXTENTS, Slice, free_ranges, laid_out, lay_out
from gpupool.domain.devices import Node
from gpupool.domain.requests import MILLI
from gpupool.state.lease import LeaseRecord


def _not_on(node: Node, index: int) -> Refusal:
    return Refusal(Why.CHANGED, f"GPU {index} is not on node {node.name}")


def check_fit(node: Node, leases: Sequence[LeaseRecord], slices: Sequence[Slice]) -> Refusal | None:
    """Why `slices` cannot join the leases on `node` (a card over-committed), or None."""
    cards = {g.index: g for g in node.gpus}
    held = [x for lease in leases if lease.holds_capacity for x in lease.slices]
    for s in slices:
        gpu = cards.get(s.gpu_index)
        if gpu is None or gpu.total_memory is None:
            return _not_on(node, s.gpu_index)
        same = [x for x in held if x.gpu_index == s.gpu_index]
        used = sum(x.size_bytes for x in same)
        compute = sum(x.compute_milli for x in same)
        if used + s.size_bytes > gpu.total_memory:
            free = gpu.total_memory - used
            return Refusal(Why.CHANGED, f"GPU {s.gpu_index} on {node.name} has {free} bytes free")
        if compute + s.compute_milli > MILLI:
            return Refusal(
                Why.CHANGED,
                f"GPU {s.gpu_index} on {node.name} has {(MILLI - compute) // 10}% compute free",
            )
    return None


def lay_out_slices(
    node: Node, leases: Sequence[LeaseRecord], planned: Sequence[Slice]
) -> tuple[Slice, ...] | Refusal:
    """`planned` with logical layouts that share no byte with the live `leases` on `node` (nor
    with each other): per card the lowest free range long enough, else several free ranges
    (`lay_out`). Refused when a card lacks the bytes or has them in too many pieces."""
    cards = {g.index: g for g in node.gpus}
    held = [x for lease in leases if lease.holds_capacity for x in lease.slices]
    out: list[Slice] = []
    for s in planned:
        gpu = cards.get(s.gpu_index)
        if gpu is None or gpu.total_memory is None:
            return _not_on(node, s.gpu_index)
        taken = [r for x in (*held, *out) if x.gpu_index == s.gpu_index for r in x.ranges]
        extents = lay_out(taken, s.size_bytes, gpu.total_memory)
        if extents is None:
            free = sum(n for _, n in free_ranges(taken, gpu.total_memory))
            return Refusal(Why.CHANGED, f"GPU {s.gpu_index} on {node.name} has {free} bytes free")
        if len(extents) > MAX_EXTENTS:
            return Refusal(
                Why.CHANGED,
                f"GPU {s.gpu_index} on {node.name} has {s.size_bytes} bytes free only in more "
                f"than {MAX_EXTENTS} separate ranges",
            )
        out.append(laid_out(s, extents))
    return tuple(out)
